"""Measures what metrics.json reports about a run: wall time and training samples/s."""

import time

import torch
from lightning.pytorch.callbacks import Callback


class RunStats(Callback):
    """Counts training samples over all ranks and the fit's wall time.

    Lightning's ThroughputMonitor logs per-step throughput to the logger; a run's summary
    needs one number for the whole fit, which this keeps.
    """

    def __init__(self):
        self.samples = 0
        self.fit_seconds = 0.0
        self._start = None

    def on_train_start(self, trainer, pl_module):
        self._start = time.monotonic()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        images = batch[0] if isinstance(batch, (list, tuple)) else batch
        n = len(images) if isinstance(images, torch.Tensor) else 0
        self.samples += n * trainer.world_size

    def on_train_end(self, trainer, pl_module):
        self.fit_seconds = time.monotonic() - self._start

    def summary(self) -> dict:
        rate = self.samples / self.fit_seconds if self.fit_seconds else 0.0
        return {"fit_seconds": round(self.fit_seconds, 2), "train_samples_per_s": round(rate, 1)}
