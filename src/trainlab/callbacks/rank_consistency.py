"""Checks that every rank holds the same weights at the end of training.

DDP keeps replicas identical only if every gradient is all-reduced and every rank applies
the same update; a skipped all-reduce (static_graph with accumulation, a comm hook that
never ran) or a rank-local update (an EMA of unsynchronised weights) breaks that silently.
This compares a float64 checksum of each top-level submodule's state (parameters and
persistent buffers), and of the module's own buffers, across ranks and records it; for a
module that draws masks, also a
checksum of every step's masks, which DDP needs equal on every rank.
"""

import json
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

from trainlab.utils.logging import get_logger
from trainlab.utils.ranges import NonNegative

log = get_logger(__name__)


class RankConsistency(Callback):
    def __init__(self, filename: str = "rank_consistency.json", atol: NonNegative = 0.0):
        self.filename, self.atol = filename, atol
        self.initial: dict[str, float] = {}
        self.masks = torch.zeros((), dtype=torch.float64)  # weighted sum of drawn indices

    @staticmethod
    def _checksums(pl_module) -> dict[str, torch.Tensor]:
        """float64 sum of each top-level child's floating state (parameters, buffers such
        as a kNN feature bank), for the children that have any, and of the module's own
        buffers (``own buffers``: a centre registered on the LightningModule itself)."""
        states = {name: child.state_dict() for name, child in pl_module.named_children()}
        states["own buffers"] = dict(pl_module.named_buffers(recurse=False))
        return {
            name: sum(t.double().sum() for t in state.values() if t.is_floating_point())
            for name, state in states.items()
            if any(t.is_floating_point() for t in state.values())
        }

    @torch.no_grad()
    def on_train_start(self, trainer, pl_module):
        # This rank's state when fitting starts: shows which modules training changed.
        self.initial = {n: float(v) for n, v in self._checksums(pl_module).items()}

    @torch.no_grad()
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if callable(getattr(pl_module, "masks", None)):  # the masks this step's loss draws
            drawn = pl_module.masks(len(batch[0]), pl_module.step_generator(batch_idx))
            step = trainer.global_step + 1
            self.masks += step * sum(t.double().sum() for t in (drawn.context, drawn.targets))

    @torch.no_grad()
    def on_train_end(self, trainer, pl_module):
        checksums = self._checksums(pl_module)
        if self.masks:
            checksums["masks"] = self.masks
        names = list(checksums)
        sums = torch.stack([checksums[n] for n in names]).to(pl_module.device)
        gathered = (
            trainer.strategy.all_gather(sums).reshape(-1, len(names)).cpu()
        )  # (world, modules)
        spread = (gathered - gathered[0]).abs().max(dim=0).values
        report = {
            "world_size": trainer.world_size,
            "checksums": {n: gathered[:, i].tolist() for i, n in enumerate(names)},
            "initial_checksums": self.initial,  # rank 0's, at the fit's start
            "consistent": bool((spread <= self.atol).all()),
        }
        if trainer.is_global_zero:
            path = Path(trainer.default_root_dir) / self.filename
            path.write_text(json.dumps(report, indent=2) + "\n")
            if not report["consistent"]:
                bad = [n for n, s in zip(names, spread.tolist(), strict=True) if s > self.atol]
                log.error(f"ranks hold different weights in {bad}: see {path}")
