"""What one steady-state optimizer step sends between ranks: collectives and bytes, split into
the gradients' and everything else's.

Neither torch nor Lightning reports this. torch's profiler does record every collective a
process group runs (``gloo:all_reduce``, ``nccl:all_reduce``, ...) with its tensor's shape
and dtype, on every thread, DDP's gradient buckets included. So one optimizer step, late
enough that DDP has rebuilt its buckets, runs under the profiler, with the backward passes
marked: collectives that start inside a backward are the gradients' (DDP's buckets, PowerSGD's
compressed ones), the rest (the monitors' gather, buffer broadcasts, agreements) are other.
Bytes are each collective's input on one rank. Multi-rank runs only; the numbers go to
metrics.json (``run.comm_bytes_per_step``, ``run.other_comm_bytes_per_step``) and the summary.
"""

import os
from collections import Counter
from contextlib import ExitStack

import torch
from lightning.pytorch.callbacks import Callback
from torch.profiler import ProfilerActivity, profile, record_function

# The profiler's own library prints start/stop lines (and, without a GPU, an error) to
# stderr on every use; read when it first starts, so before any profile.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
BACKWARD = "trainlab::backward"
# The dtype names the profiler records, and their sizes in bytes.
ITEMSIZE = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
    "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
}  # fmt: skip


def tally(events, backend: str) -> dict:
    """{"gradient"|"other": {"bytes", "collectives": Counter}} from profiler events.

    ``events`` are kineto events (name, start, duration, shapes, dtypes); a collective is an
    event named ``<backend>:<op>``, gradient traffic one that starts inside a BACKWARD range.
    """
    events = list(events)
    backward = [
        (e.start_ns(), e.start_ns() + e.duration_ns()) for e in events if e.name() == BACKWARD
    ]
    out = {kind: {"bytes": 0, "collectives": Counter()} for kind in ("gradient", "other")}
    for e in events:
        if not e.name().startswith(f"{backend}:"):
            continue
        shapes, dtypes = e.shapes(), e.dtypes()
        nbytes = 0
        for shape, dtype in zip(shapes[:1], dtypes[:1], strict=False):  # the input, not outputs
            nbytes += ITEMSIZE.get(dtype, 4) * int(torch.Size(shape).numel())
        kind = "gradient" if any(a <= e.start_ns() <= b for a, b in backward) else "other"
        out[kind]["bytes"] += nbytes
        out[kind]["collectives"][e.name().split(":", 1)[1]] += 1
    return out


class CommCounter(Callback):
    """Profiles optimizer step ``at_step`` (counted from 0) of a multi-rank fit."""

    def __init__(self, at_step: int = 3):
        self.at_step = at_step
        self.result: dict | None = None
        self._stack: ExitStack | None = None
        self._backward: ExitStack | None = None
        self._profiler = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        first_micro_batch = batch_idx % trainer.accumulate_grad_batches == 0
        if trainer.world_size > 1 and trainer.global_step == self.at_step and first_micro_batch:
            if self._stack is None and self.result is None:
                self._stack = ExitStack()
                # one window, no schedule: all its events are wanted (torch 2.11 warns on
                # the console that a cycle's end clears them unless acc_events is set)
                self._profiler = self._stack.enter_context(
                    profile(activities=[ProfilerActivity.CPU], record_shapes=True, acc_events=True)
                )

    def on_before_backward(self, trainer, pl_module, loss):
        if self._stack is not None:
            self._backward = ExitStack()
            self._backward.enter_context(record_function(BACKWARD))

    def on_after_backward(self, trainer, pl_module):
        if self._backward is not None:
            self._backward.close()
            self._backward = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._stack is None or trainer.global_step == self.at_step:
            return  # not profiling, or the optimizer step is still to come
        self._stack.close()
        self._stack = None
        backend = torch.distributed.get_backend() if torch.distributed.is_initialized() else ""
        counts = tally(self._profiler.profiler.kineto_results.events(), backend)
        self._profiler = None
        self.result = {
            "comm_bytes_per_step": counts["gradient"]["bytes"],
            "other_comm_bytes_per_step": counts["other"]["bytes"],
            "comm_collectives_per_step": dict(counts["gradient"]["collectives"]),
            "other_comm_collectives_per_step": dict(counts["other"]["collectives"]),
            "comm_measured_at_step": self.at_step,
        }

    def summary(self) -> dict:
        return self.result or {}
