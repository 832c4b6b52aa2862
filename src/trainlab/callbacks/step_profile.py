"""Where a few steady training steps spend their time, and which lines make the host wait.

Profiles optimizer steps [start, start + steps) with torch.profiler (CPU, and the GPU's
kernels where there is one) and writes ``step_profile.json`` to the run dir:
- ``busy``: the fraction of the steps' wall time in which at least one GPU kernel ran
  (a GPU-bound step reads near 1; the rest is the host, the loader or syncs);
- ``top``: the kernels (or on a CPU the operators) that took the most time;
- ``syncs``: on CUDA, every host sync over the same steps
  (``torch.cuda.set_sync_debug_mode("warn")``), counted by the line of trainlab or
  Lightning that caused it, and per step (logging steps sync by design: throughput.py).
Part of the GPU check (docs/parts/gpu_check.md): benchmarks/gpu.py adds it by
``callbacks=[default,step_profile]``, as any run can; costs nothing outside its steps.
"""

import json
import time
import traceback
import warnings
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from torch.profiler import ProfilerActivity, profile

from trainlab.utils.ranges import Count, NonNegativeInt


def busy_fraction(intervals: list[tuple[float, float]], wall: float) -> float:
    """The length of the union of ``intervals`` over ``wall`` (same unit)."""
    covered, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            covered += b - max(a, end)
            end = b
    return covered / wall if wall > 0 else 0.0


def caller(stack: list[traceback.FrameSummary]) -> str:
    """The innermost frame of trainlab or Lightning: the line that asked for the sync."""
    for frame in reversed(stack):
        if frame.filename == __file__ or "warnings" in Path(frame.filename).name:
            continue  # this handler and Python's warnings machinery
        if "trainlab" in frame.filename or "lightning" in frame.filename:
            return f"{Path(frame.filename).name}:{frame.lineno} {frame.name}"
    return "elsewhere"


class StepProfile(Callback):
    def __init__(self, start: NonNegativeInt = 50, steps: Count = 5, top: Count = 12):
        self.start, self.steps, self.top = start, steps, top
        self._stack: ExitStack | None = None
        self._syncs: Counter = Counter()  # by the line that synced
        self._by_step: Counter = Counter()  # by global step
        self._step = 0
        self._t0 = 0.0

    def _on_sync(self, message, category, filename, lineno, file=None, line=None):
        if "synchronizing" in str(message):
            self._syncs[caller(traceback.extract_stack())] += 1
            self._by_step[self._step] += 1

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._step = trainer.global_step
        if trainer.global_step != self.start or self._stack is not None:
            return
        cuda = trainer.strategy.root_device.type == "cuda"
        self._stack = ExitStack()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        # One window, no schedule: its events are all wanted (torch 2.11 warns on the console
        # that a cycle's end would clear them unless acc_events is set).
        self._profiler = self._stack.enter_context(profile(activities=activities, acc_events=True))
        if cuda:
            torch.cuda.synchronize()
            self._stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("always")
            warnings.showwarning = self._on_sync
            torch.cuda.set_sync_debug_mode("warn")
            self._stack.callback(torch.cuda.set_sync_debug_mode, "default")
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._stack is None:
            return
        if trainer.global_step < self.start + self.steps:
            return
        cuda = trainer.strategy.root_device.type == "cuda"
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize()
        wall = time.perf_counter() - self._t0
        self._stack.close()
        self._stack = None
        totals: Counter = Counter()
        intervals = []
        if cuda:  # the GPU's kernels (not the ranges that annotate them, e.g. Optimizer.step)
            for e in self._profiler.events():
                annotation = getattr(e, "is_user_annotation", False)
                if e.device_type == torch.autograd.DeviceType.CUDA and not annotation:
                    totals[e.name] += e.time_range.elapsed_us()
                    intervals.append((e.time_range.start, e.time_range.end))
        else:  # operators by their own CPU time
            for e in self._profiler.key_averages():
                totals[e.key] += e.self_cpu_time_total
        report = {
            "steps": self.steps,
            "wall_ms_per_step": 1000 * wall / self.steps,
            "busy": busy_fraction(intervals, wall * 1e6) if cuda else None,
            "top": [
                {
                    "name": name[:120],
                    "ms_per_step": us / 1000 / self.steps,
                    "share": us / (wall * 1e6),
                }
                for name, us in totals.most_common(self.top)
            ],
            "syncs_per_step": sum(self._syncs.values()) / self.steps if cuda else None,
            "syncs": dict(self._syncs.most_common()),
            "syncs_by_step": {str(k): v for k, v in sorted(self._by_step.items())},
        }
        if trainer.is_global_zero:
            path = Path(trainer.default_root_dir) / "step_profile.json"
            path.write_text(json.dumps(report, indent=1))
