"""Checks that every rank holds the same weights at the end of training.

DDP keeps replicas identical only if every gradient is all-reduced and every rank applies
the same update; a skipped all-reduce (static_graph with accumulation, a comm hook that
never ran) or a rank-local update (an EMA of unsynchronised weights) breaks that silently.
This compares a float64 checksum of each top-level submodule's state (parameters and
persistent buffers) across ranks and records it.
"""

import json
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

from trainlab.utils.logging import get_logger

log = get_logger(__name__)


class RankConsistency(Callback):
    def __init__(self, filename: str = "rank_consistency.json", atol: float = 0.0):
        self.filename, self.atol = filename, atol

    @torch.no_grad()
    def on_train_end(self, trainer, pl_module):
        # Parameters and persistent buffers (e.g. a kNN feature bank) of each top-level child.
        states = {name: child.state_dict() for name, child in pl_module.named_children()}
        names = [n for n, sd in states.items() if any(t.is_floating_point() for t in sd.values())]
        sums = torch.stack(
            [
                sum(t.double().sum() for t in states[n].values() if t.is_floating_point())
                for n in names
            ]
        ).to(pl_module.device)
        gathered = (
            trainer.strategy.all_gather(sums).reshape(-1, len(names)).cpu()
        )  # (world, modules)
        spread = (gathered - gathered[0]).abs().max(dim=0).values
        report = {
            "world_size": trainer.world_size,
            "checksums": {n: gathered[:, i].tolist() for i, n in enumerate(names)},
            "consistent": bool((spread <= self.atol).all()),
        }
        if trainer.is_global_zero:
            path = Path(trainer.default_root_dir) / self.filename
            path.write_text(json.dumps(report, indent=2) + "\n")
            if not report["consistent"]:
                bad = [n for n, s in zip(names, spread.tolist(), strict=True) if s > self.atol]
                log.error(f"ranks hold different weights in {bad}: see {path}")
