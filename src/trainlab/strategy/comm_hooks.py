"""DDP communication hooks chosen by name, and what they save on the wire.

torch ships the hooks (PowerSGD, fp16/bf16 compression and their wrappers); this file
only builds them from config and counts bytes, which torch does not report per step.
"""

from dataclasses import dataclass
from typing import Literal

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

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
