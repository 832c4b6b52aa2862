"""Reseeds the global RNGs before every training batch from (seed, epoch, batch, rank).

Drop path, dropout, the VAE's noise and MixUp draw from the global RNGs. Seeded from the
position in the run, a resumed run draws exactly what the uninterrupted run drew; after
a resume the global RNGs otherwise start from wherever the new process left them.
Ranks get different streams (rank is part of the seed), as they would without this.
"""

import lightning as L

from trainlab.utils.seeding import derived_seed, run_seed, seed_global_rngs


class SeedEachStep(L.Callback):
    def on_train_batch_start(self, trainer: L.Trainer, pl_module, batch, batch_idx: int) -> None:
        position = (trainer.current_epoch, batch_idx, trainer.global_rank)
        seed_global_rngs(derived_seed(run_seed(), *position))
