"""DDP communication hooks chosen by name (``strategy=ddp_powersgd``, ``ddp_fp16_compress``,
``ddp_bf16_compress``), and what they save on the wire.

torch ships the hooks (PowerSGD, fp16/bf16 compression and their wrappers); this file
builds them from config, registers them on every backend and counts bytes, which torch does
not report per step. Lightning registers ``ddp_comm_hook`` only when the root device is CUDA
and says nothing otherwise, so a PowerSGD run on CPU/gloo would silently train without it.
"""

from dataclasses import dataclass
from typing import Any, Literal

import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
from torch.nn.parallel import DistributedDataParallel

from trainlab.callbacks.comm_stats import CommStatsLogger
from trainlab.strategy.ddp import DDPStrategy
from trainlab.utils.errors import ConfigError

CommHook = Literal["powersgd", "batched_powersgd", "fp16_compress", "bf16_compress"]
CompressWrapper = Literal["fp16", "bf16"]

_COMPRESS = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}
_WRAPPERS = {
    "fp16": default_hooks.fp16_compress_wrapper,
    "bf16": default_hooks.bf16_compress_wrapper,
}


@dataclass
class CommStats:
    """Bytes the hook sent, against the bytes plain all-reduce would have sent, per step."""

    dense_bytes: int = 0  # running totals over the current optimizer step
    sent_bytes: int = 0
    calls: int = 0  # hook calls (one per bucket per optimizer step)

    def take(self) -> tuple[int, int]:
        """Return and reset this step's (dense, sent) byte counts."""
        out = (self.dense_bytes, self.sent_bytes)
        self.dense_bytes = self.sent_bytes = 0
        return out


def build_comm_hook(
    name: CommHook,
    wrapper: CompressWrapper | None,
    powersgd: dict,
    stats: CommStats,
    one_bucket_at_a_time: bool = False,
):
    """Return ``(state, hook)`` for ``DistributedDataParallel.register_comm_hook``.

    The hook is wrapped to add what it sent to ``stats``; PowerSGD's own counters
    (``total_numel_after_compression``) say how much of each bucket it compressed.

    ``one_bucket_at_a_time`` waits for each bucket's communication before the next
    bucket's starts. PowerSGD issues its later all-reduces from future callbacks; on
    gloo those callbacks of different buckets run on different threads, so two ranks can
    issue them in different orders and gloo aborts ("Received data size doesn't match
    expected size"; reproduced here with 2 CPU ranks and several buckets, with and without
    autocast). Waiting fixes the order at the cost of overlapping communication with
    backward, which a CPU run barely has.
    """
    if name in ("powersgd", "batched_powersgd"):
        state = psgd.PowerSGDState(process_group=None, **powersgd)
        hook = psgd.powerSGD_hook if name == "powersgd" else psgd.batched_powerSGD_hook
    elif wrapper is not None:
        raise ValueError(f"compress_wrapper wraps PowerSGD only, not comm_hook={name}")
    else:
        state, hook = None, _COMPRESS[name.removesuffix("_compress")]
    wire_itemsize = 2 if (wrapper or name.endswith("_compress")) else None
    if wrapper is not None:
        hook = _WRAPPERS[wrapper](hook)

    def counted(state, bucket):
        buffer = bucket.buffer()
        itemsize = wire_itemsize or buffer.element_size()
        before = state.total_numel_after_compression if isinstance(state, psgd.PowerSGDState) else 0
        future = hook(state, bucket)
        after = state.total_numel_after_compression if isinstance(state, psgd.PowerSGDState) else 0
        # Before start_powerSGD_iter PowerSGD runs plain all-reduce and counts nothing.
        sent = (after - before) or buffer.numel()
        stats.dense_bytes += buffer.numel() * buffer.element_size()
        stats.sent_bytes += sent * itemsize
        stats.calls += 1
        if one_bucket_at_a_time:
            future.wait()
        return future

    return state, counted


def check_hook(comm_hook: str, compress_wrapper: str | None, powersgd: dict) -> None:
    """Combinations torch rejects or fails on, refused in one line before any process starts."""
    if comm_hook == "batched_powersgd":
        # torch 2.14.1: batched_powerSGD_hook passes a 2-D matrix to _orthogonalize, which
        # asserts a 3-D batch; it fails on the first compressed step on every backend.
        raise ConfigError(
            "strategy.comm_hook=batched_powersgd fails inside torch 2.14.1 (_orthogonalize "
            "asserts on its 2-D matrix): use strategy.comm_hook=powersgd"
        )
    if compress_wrapper and comm_hook not in ("powersgd", "batched_powersgd"):
        raise ConfigError(
            "strategy.compress_wrapper wraps PowerSGD only: use strategy=ddp_powersgd, "
            f"or comm_hook={compress_wrapper}_compress on its own"
        )
    if (
        comm_hook in ("powersgd", "batched_powersgd")
        and powersgd.get("start_powerSGD_iter", 1000) <= 1
    ):
        if powersgd.get("use_error_feedback", True) or powersgd.get("warm_start", True):
            raise ConfigError(
                "strategy.powersgd.start_powerSGD_iter must be > 1 with error feedback or warm "
                "start on (torch's PowerSGDState requires it): set it to 2 or more"
            )


class CommHookDDPStrategy(DDPStrategy):
    """trainlab's ``DDPStrategy`` plus a comm hook chosen by name, on any backend; its
    savings are logged (``comm/compression_rate``, bytes per step) by ``CommStatsLogger``,
    which it adds to the Trainer.

    Args:
        comm_hook: powersgd | batched_powersgd | fp16_compress | bf16_compress.
        compress_wrapper: fp16 | bf16: cast PowerSGD's input to half precision first.
        powersgd: keyword arguments of ``PowerSGDState`` (rank, start iteration, ...).
        **kwargs: Lightning's ``DDPStrategy`` and ``DistributedDataParallel`` arguments.
    """

    def __init__(
        self,
        comm_hook: CommHook,
        compress_wrapper: CompressWrapper | None = None,
        powersgd: dict | None = None,
        **kwargs: Any,
    ) -> None:
        check_hook(comm_hook, compress_wrapper, dict(powersgd or {}))
        super().__init__(**kwargs)
        self.comm_hook = comm_hook
        self.compress_wrapper = compress_wrapper
        self.powersgd = dict(powersgd or {})
        self.comm_stats = CommStats()
        self.comm_state = None  # PowerSGD's iteration counter lives here once registered

    def setup(self, trainer) -> None:
        if not any(isinstance(c, CommStatsLogger) for c in trainer.callbacks):
            trainer.callbacks.append(CommStatsLogger())
        super().setup(trainer)

    def register_ddp_hooks(self) -> None:
        super().register_ddp_hooks()  # Lightning's own ddp_comm_hook argument, CUDA only
        assert isinstance(self.model, DistributedDataParallel)
        state, hook = build_comm_hook(
            self.comm_hook,
            self.compress_wrapper,
            self.powersgd,
            self.comm_stats,
            one_bucket_at_a_time="powersgd" in self.comm_hook and dist.get_backend() == "gloo",
        )
        self.model.register_comm_hook(state, hook)
        self.comm_state = state
