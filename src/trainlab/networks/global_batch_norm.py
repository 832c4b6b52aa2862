"""BatchNorm over the global batch, on every backend: DINO's head and a CNN encoder under DDP.

Per-rank BatchNorm statistics make 2 ranks of half a batch differ from one process on the
whole batch. torch's SyncBatchNorm fixes that on GPUs only (it refuses CPU tensors, and DDP
refuses a CPU module that holds one), so these gather every rank's rows (``gather_batch``,
with gradients) on any backend. Written here: lightly's and timm's heads use SyncBatchNorm,
which gloo ranks cannot run.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from trainlab.networks.gather import gather_batch


class GlobalBatchNorm1d(nn.BatchNorm1d):
    """(B, dim): each feature standardised over every rank's batch, then scaled and shifted
    (``weight``, ``bias``: the state dict of ``BatchNorm1d(dim, track_running_stats=False)``).
    It keeps no running statistics, so a forward moves no state and student and teacher
    normalise alike in train and eval mode."""

    def __init__(self, dim: int):
        super().__init__(dim, track_running_stats=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = gather_batch(x)
        mean, var = batch.mean(dim=0), batch.var(dim=0, unbiased=False)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class GlobalBatchNorm2d(nn.BatchNorm2d):
    """A ``BatchNorm2d`` (its state dict, running statistics and eval behaviour: an exported
    encoder loads into timm's own model) whose training statistics are the global batch's:
    under several ranks, every rank's rows gathered and normalised as one process would
    (the same statistics and running averages, to the kit's tolerance), each rank keeping
    its own rows. Pass as a timm encoder's ``norm_layer`` (configs/model/encoder/resnet.yaml).
    On GPUs,
    ``trainer.sync_batchnorm=true`` swaps in torch's SyncBatchNorm (Lightning's conversion),
    which reduces statistics instead of gathering rows; DDP refuses SyncBatchNorm on CPUs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ranks = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if not (self.training and ranks > 1):
            return super().forward(x)
        batch = gather_batch(x)
        if self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
        out = F.batch_norm(
            batch, self.running_mean, self.running_var, self.weight, self.bias,
            training=True, momentum=self.momentum, eps=self.eps,
        )  # fmt: skip
        rank = dist.get_rank()
        return out[rank * len(x) : (rank + 1) * len(x)]
