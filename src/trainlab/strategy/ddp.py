"""Lightning's DDP strategy with communication hooks that run on every backend, and DDP built
on the stream that trains.

Lightning registers ``ddp_comm_hook`` only when the root device is CUDA and says nothing
otherwise, so a PowerSGD run on CPU/gloo would silently train without PowerSGD. This
subclass registers the hook on any backend and counts what it sends.
"""

from typing import Any

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from trainlab.strategy.comm_hooks import CommHook, CommStats, CompressWrapper, build_comm_hook
from trainlab.utils.lightning_internals import DDPStrategyHooks


class DDPStrategy(DDPStrategyHooks):
    """``DDPStrategy`` plus ``comm_hook`` / ``compress_wrapper`` / ``powersgd`` chosen by name.

    Args:
        comm_hook: powersgd | batched_powersgd | fp16_compress | bf16_compress | None.
        compress_wrapper: fp16 | bf16: cast PowerSGD's input to half precision first.
        powersgd: keyword arguments of ``PowerSGDState`` (rank, start iteration, ...).
        **kwargs: Lightning's ``DDPStrategy`` and ``DistributedDataParallel`` arguments.
    """

    def __init__(
        self,
        comm_hook: CommHook | None = None,
        compress_wrapper: CompressWrapper | None = None,
        powersgd: dict | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.comm_hook = comm_hook
        self.compress_wrapper = compress_wrapper
        self.powersgd = dict(powersgd or {})
        self.comm_stats = CommStats() if comm_hook else None

    def wrap_model(self, model) -> DistributedDataParallel:
        """DDP built on the current stream. Lightning 2.6 builds it on a side stream (for
        CUDA-graph capture of the whole network), which leaves its gradient-accumulation nodes
        on that stream while every step runs on the default one: torch then warns at every
        backward ("The AccumulateGrad node's stream does not match ...") and syncs the two."""
        return DistributedDataParallel(
            module=model, device_ids=self.determine_ddp_device_ids(), **self.ddp_kwargs
        )

    def register_ddp_hooks(self) -> None:
        super().register_ddp_hooks()  # Lightning's own ddp_comm_hook argument, CUDA only
        if self.comm_hook is None:
            return
        assert isinstance(self.model, DistributedDataParallel)
        state, hook = build_comm_hook(
            self.comm_hook,
            self.compress_wrapper,
            self.powersgd,
            self.comm_stats,
            one_bucket_at_a_time="powersgd" in self.comm_hook and dist.get_backend() == "gloo",
        )
        self.model.register_comm_hook(state, hook)
        self.comm_state = state  # PowerSGD's iteration counter lives here
