"""BatchNorm over the global batch, on every backend: DINO's head and a CNN encoder under DDP.

Per-rank BatchNorm statistics make 2 ranks of half a batch differ from one process on the
whole batch. torch's SyncBatchNorm fixes that on GPUs only (it refuses CPU tensors, and DDP
refuses a CPU module that holds one), and timm's ``convert_sync_batchnorm`` converts to it,
so these gather every rank's rows (``gather_batch``, with gradients) on any backend.
``to_global_batch_norm`` turns every BatchNorm of a timm CNN into its global kind, timm's
``BatchNormAct2d`` (EfficientNet, RegNet, MobileNet) included.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from timm.layers import BatchNormAct2d
from torch import nn

from trainlab.networks.gather import gather_batch


def ranks() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def normalised_over_ranks(bn: nn.BatchNorm2d, x: torch.Tensor) -> torch.Tensor:
    """``bn``'s training normalisation with the statistics of every rank's rows (and its
    running statistics moved by them, as one process would), this rank's rows returned."""
    batch = gather_batch(x)
    if bn.num_batches_tracked is not None:
        bn.num_batches_tracked.add_(1)
    out = F.batch_norm(
        batch, bn.running_mean, bn.running_var, bn.weight, bn.bias,
        training=True, momentum=bn.momentum, eps=bn.eps,
    )  # fmt: skip
    rank = dist.get_rank()
    return out[rank * len(x) : (rank + 1) * len(x)]


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
    its own rows. ``to_global_batch_norm`` makes a timm encoder's (model.encoder.batch_norm).
    On GPUs, ``trainer.sync_batchnorm=true`` swaps in torch's SyncBatchNorm (Lightning's
    conversion), which reduces statistics instead of gathering rows; DDP refuses
    SyncBatchNorm on CPUs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and ranks() > 1):
            return super().forward(x)
        return normalised_over_ranks(self, x)


class GlobalBatchNormAct2d(BatchNormAct2d):
    """timm's ``BatchNormAct2d`` (BatchNorm, then its drop and activation; the same state
    dict) with the global batch's training statistics, as ``GlobalBatchNorm2d``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and ranks() > 1):
            return super().forward(x)
        return self.act(self.drop(normalised_over_ranks(self, x)))


# The classes converted, and their global kinds; a subclass of these is left alone (it may
# change the forward), and the run check names it if it trains on several ranks.
GLOBAL_KINDS = {nn.BatchNorm2d: GlobalBatchNorm2d, BatchNormAct2d: GlobalBatchNormAct2d}
PER_RANK = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
GLOBAL = (GlobalBatchNorm1d, GlobalBatchNorm2d, GlobalBatchNormAct2d, nn.SyncBatchNorm)


def to_global_batch_norm(module: nn.Module) -> nn.Module:
    """Every ``BatchNorm2d`` and ``BatchNormAct2d`` of ``module`` as its global kind, in
    place. The global kinds add no state, only a forward, so each module's class is
    swapped: its weights, running statistics, activation and drop stay as they are."""
    for child in module.modules():
        if type(child) in GLOBAL_KINDS:
            child.__class__ = GLOBAL_KINDS[type(child)]
    return module


def per_rank_batch_norms(module: nn.Module) -> list[str]:
    """The names of ``module``'s BatchNorms whose training statistics are one rank's."""
    return [
        name
        for name, child in module.named_modules()
        if isinstance(child, PER_RANK) and not isinstance(child, GLOBAL)
    ]
