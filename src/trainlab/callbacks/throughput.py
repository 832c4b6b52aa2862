"""The throughput part (docs/parts/throughput.md): a run's speed, as samples/s, tokens/s,
TFLOP/s and MFU.

Lightning's ThroughputMonitor counts samples and items from the batch alone
(``batch_size_fn``, ``length_fn``); I-JEPA's token count and FLOPs change every step with
masks the model draws, which the batch does not hold, so the module reports its own
(``step_tokens``, ``step_flops``: IJEPA.count_work) and this callback turns them into rates.
Rates are logged at the logging interval, over the steps since the last log, so a GPU run
syncs once per interval, not every step. The run summary gets the same numbers from the end
of the first logged interval to the end of the fit: start-up and compilation are left out
(on an H200, compile=true's first 10 steps of ViT-H/14 took 95 s, and whole-fit MFU read
0.04 where the later intervals read 0.17).
"""

import time

import torch
from lightning.fabric.utilities.throughput import get_available_flops
from lightning.pytorch.callbacks import Callback

from trainlab.utils import lightning_internals
from trainlab.utils.ranges import Positive

# Dense bf16/fp16 peaks (TFLOP/s) that Lightning's table gets wrong. It names the H200 by
# form factor ("h200 sxm1"), which torch's device name ("NVIDIA H200") lacks, so it finds
# none, and its "h200 sxm1" entry is the sparse peak (2,000). The H200's tensor cores and
# clocks are the H100 SXM's: 989.4 dense (NVIDIA's datasheet: 1,979 "with sparsity").
DENSE_PEAKS = {"h200": {torch.bfloat16: 989.4, torch.float16: 989.4}}


def peak_tflops(device: torch.device, dtype) -> float | None:
    """The device's dense peak for the run's compute dtype: DENSE_PEAKS, else Lightning's."""
    name = torch.cuda.get_device_name(device).lower()
    for chip, peaks in DENSE_PEAKS.items():
        if chip in name:
            return peaks.get(dtype)
    peak = get_available_flops(device, dtype)
    return peak / 1e12 if peak else None


class Throughput(Callback):
    """``peak_tflops``: the device's peak for MFU; None takes the GPU's dense peak for the
    run's precision (peak_tflops() above; none for CPUs: give it, per device)."""

    def __init__(self, peak_tflops: Positive | None = None):
        self.peak_tflops = peak_tflops
        self.total = {"samples": 0, "tokens": 0, "flops": 0}
        self._interval = dict(self.total)
        self._start = self._mark = self._end = None
        self._seconds = 0.0  # the fit's, once it ends
        self._steady = None  # (time, work so far) at the end of the first logged interval
        self.world_size = 1

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.peak_tflops is None and trainer.strategy.root_device.type == "cuda":
            dtype = lightning_internals.compute_dtype(trainer.precision_plugin)
            self.peak_tflops = peak_tflops(trainer.strategy.root_device, dtype)

    def on_train_start(self, trainer, pl_module):
        self._start = self._mark = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        images = batch[0] if isinstance(batch, (list, tuple)) else batch
        if isinstance(images, list) and images:  # views of one batch of images: count images
            images = images[0]
        work = {
            "samples": len(images) if isinstance(images, torch.Tensor) else 0,
            "tokens": getattr(pl_module, "step_tokens", 0),
            "flops": getattr(pl_module, "step_flops", 0),
        }
        for key, value in work.items():  # every rank does the same work
            self.total[key] += value * trainer.world_size
            self._interval[key] += value * trainer.world_size
        if lightning_internals.should_update_logs(trainer):
            if trainer.strategy.root_device.type == "cuda":
                torch.cuda.synchronize()  # the kernels of the interval are done
            now = time.perf_counter()
            pl_module.log_dict(self.rates(self._interval, now - self._mark, trainer.world_size))
            self._interval, self._mark = dict.fromkeys(self._interval, 0), now
            if self._steady is None:
                self._steady = (now, dict(self.total))

    def rates(self, work: dict, seconds: float, world_size: int) -> dict[str, float]:
        """train/samples_per_s, and where the module counts them tokens_per_s, tflops_per_s
        and mfu (per device, against ``peak_tflops``)."""
        seconds = max(seconds, 1e-9)
        rates = {"train/samples_per_s": work["samples"] / seconds}
        if work["tokens"]:
            rates["train/tokens_per_s"] = work["tokens"] / seconds
        if work["flops"]:
            rates["train/tflops_per_s"] = work["flops"] / seconds / 1e12
            if self.peak_tflops:
                rates["train/mfu"] = rates["train/tflops_per_s"] / world_size / self.peak_tflops
        return rates

    def on_train_end(self, trainer, pl_module):
        self._end = time.perf_counter()
        self._seconds = self._end - self._start
        self.world_size = trainer.world_size

    def summary(self) -> dict:
        """The rates after the first logged interval (over the whole fit where no interval
        ended before the last step), for metrics.json's ``run``."""
        work, seconds = self.total, self._seconds
        if self._steady is not None and self._steady[1]["samples"] < self.total["samples"]:
            since, before = self._steady
            work = {key: self.total[key] - before[key] for key in self.total}
            seconds = self._end - since
        rates = self.rates(work, seconds, self.world_size)
        return {k.replace("/", "_"): float(f"{v:.4g}") for k, v in rates.items()}  # 4 digits
