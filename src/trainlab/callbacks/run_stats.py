"""The fit's wall time (from the start of training, after the sanity check) and, on CUDA, its
measured peak memory, for metrics.json's ``run`` and the run summary. Lightning's Timer adds
earlier attempts' time from the checkpoint; a resumed run here reports its own."""

import time

import torch
from lightning.pytorch.callbacks import Callback


class RunStats(Callback):
    def __init__(self):
        self.fit_seconds = 0.0
        self.peak_memory_gib = None  # torch's allocator peak over the fit, on CUDA
        self._start = None

    def on_train_start(self, trainer, pl_module):
        self._start = time.perf_counter()

    def on_train_end(self, trainer, pl_module):
        self.fit_seconds = time.perf_counter() - self._start
        if trainer.strategy.root_device.type == "cuda":
            self.peak_memory_gib = round(torch.cuda.max_memory_allocated() / 2**30, 2)

    def summary(self) -> dict:
        memory = {"peak_memory_gib": self.peak_memory_gib} if self.peak_memory_gib else {}
        return {"fit_seconds": round(self.fit_seconds, 2), **memory}
