"""A running mean that every rank holds equal: DINO's centre of the teacher's outputs.

Each update averages the batch mean over ranks first (torch.distributed's all_reduce, when a
process group exists), then moves the buffer by an EMA, so the centre describes the global
batch and needs no DDP buffer broadcast to stay equal. Lightly keeps the same idea in its
``Center`` module; here it is a buffer, checkpointed and compared across ranks with the
module (callbacks/rank_consistency.py).
"""

import torch
import torch.distributed as dist
from torch import nn


class RunningMean(nn.Module):
    def __init__(self, dim: int, momentum: float):
        super().__init__()
        self.momentum = momentum
        self.register_buffer("value", torch.zeros(1, dim))

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        """value <- momentum * value + (1 - momentum) * mean of ``batch`` (N, dim) over ranks."""
        mean = batch.float().mean(dim=0, keepdim=True)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(mean)
            mean /= dist.get_world_size()
        self.value.lerp_(mean, 1.0 - self.momentum)
