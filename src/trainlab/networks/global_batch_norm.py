"""BatchNorm over the global batch, from batch statistics alone: DINO's head under DDP.

Per-rank BatchNorm statistics make 2 ranks of half a batch differ from one process on the
whole batch. torch's SyncBatchNorm fixes that on GPUs only (it does not run on CPUs) and keeps
running statistics; this one gathers every rank's rows (``gather_batch``, with gradients) on
any backend and keeps none, so a forward moves no state and student and teacher normalise
alike in train and eval mode. Written here: lightly's and timm's heads use SyncBatchNorm.
"""

import torch
from torch import nn

from trainlab.networks.gather import gather_batch


class GlobalBatchNorm1d(nn.BatchNorm1d):
    """(B, dim): each feature standardised over every rank's batch, then scaled and shifted
    (``weight``, ``bias``: the state dict of ``BatchNorm1d(dim, track_running_stats=False)``)."""

    def __init__(self, dim: int):
        super().__init__(dim, track_running_stats=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = gather_batch(x)
        mean, var = batch.mean(dim=0), batch.var(dim=0, unbiased=False)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias
