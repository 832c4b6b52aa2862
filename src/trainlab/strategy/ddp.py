"""Lightning's DDP strategy, with DDP built on the stream that trains."""

from torch.nn.parallel import DistributedDataParallel

from trainlab.utils.lightning_internals import DDPStrategyHooks


class DDPStrategy(DDPStrategyHooks):
    """``DDPStrategy`` of Lightning; its arguments are Lightning's and DDP's."""

    def wrap_model(self, model) -> DistributedDataParallel:
        """DDP built on the current stream. Lightning 2.6 builds it on a side stream (for
        CUDA-graph capture of the whole network), which leaves its gradient-accumulation nodes
        on that stream while every step runs on the default one: torch then warns at every
        backward ("The AccumulateGrad node's stream does not match ...") and syncs the two."""
        return DistributedDataParallel(
            module=model, device_ids=self.determine_ddp_device_ids(), **self.ddp_kwargs
        )
