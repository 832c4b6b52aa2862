"""VICReg's variance and covariance terms (Bardes et al. 2022) on a batch of embeddings: a
hinge on each dimension's spread and a penalty on their correlations, which keep features
from collapsing. VICReg's loss uses both; I-JEPA's optional ``var_cov`` regulariser too."""

import torch
import torch.nn.functional as F
from torch import nn


def variance(z: torch.Tensor) -> torch.Tensor:
    """A hinge on every dimension's std of a centred batch (B, D): mean of relu(1 - std)."""
    return F.relu(1 - torch.sqrt(z.var(dim=0) + 1e-4)).mean()


def covariance(z: torch.Tensor) -> torch.Tensor:
    """The off-diagonal covariance of a centred batch (B, D), squared and summed, over D."""
    cov = (z.T @ z) / (len(z) - 1)
    off = cov - torch.diag(torch.diag(cov))
    return off.pow(2).sum() / z.shape[1]


class VarianceCovarianceLoss(nn.Module):
    """The variance and covariance terms of one batch (B, D), equally weighted."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        z = z - z.mean(dim=0)
        return variance(z) + covariance(z)
