"""Lightning's ModelCheckpoint for every-N-steps checkpoints, minus the last batch of an epoch.

A checkpoint written at an epoch's last batch (before its validation) resumes through
Lightning's "restarted at epoch end" path, which reuses the restored data iterator for the
next epoch instead of starting a new one: that epoch then replays the previous epoch's
order (found by research/chaos.py). last.ckpt, written after validation, covers that moment.
"""

from lightning.pytorch.callbacks import ModelCheckpoint


class StepCheckpoint(ModelCheckpoint):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        progress = trainer.fit_loop.epoch_loop.batch_progress.current
        if progress.processed >= trainer.num_training_batches:
            return
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
