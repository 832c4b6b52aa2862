"""VICReg's networks and loss terms (Bardes et al. 2022), plain torch.

Written here: lightly's VICRegLoss is not among the template's dependencies, and the terms
are a few lines. I-JEPA's optional ``var_cov`` regulariser uses the same two terms.
"""

import torch
import torch.nn.functional as F
from torch import nn

from trainlab.networks.global_batch_norm import GlobalBatchNorm1d
from trainlab.utils.ranges import Count


def variance(z: torch.Tensor) -> torch.Tensor:
    """A hinge on every dimension's std of a centred batch (B, D): mean of relu(1 - std)."""
    return F.relu(1 - torch.sqrt(z.var(dim=0) + 1e-4)).mean()


def covariance(z: torch.Tensor) -> torch.Tensor:
    """The off-diagonal covariance of a centred batch (B, D), squared and summed, over D."""
    cov = (z.T @ z) / (len(z) - 1)
    off = cov - torch.diag(torch.diag(cov))
    return off.pow(2).sum() / z.shape[1]


def variance_covariance(z: torch.Tensor) -> torch.Tensor:
    """VICReg's variance and covariance terms on a batch of embeddings (B, D), equally
    weighted (I-JEPA's ``var_cov``)."""
    z = z - z.mean(dim=0)
    return variance(z) + covariance(z)


def vicreg_terms(z1: torch.Tensor, z2: torch.Tensor) -> dict[str, torch.Tensor]:
    """Invariance (mean squared distance of the two views), and variance and covariance of
    each view, averaged over the two; in float32."""
    z1, z2 = z1.float(), z2.float()
    c1, c2 = z1 - z1.mean(dim=0), z2 - z2.mean(dim=0)
    return {
        "invariance": F.mse_loss(z1, z2),
        "variance": (variance(c1) + variance(c2)) / 2,
        "covariance": (covariance(c1) + covariance(c2)) / 2,
    }


class Expander(nn.Sequential):
    """VICReg's expander: ``depth`` linear layers of ``width``, BatchNorm and ReLU between
    them. The BatchNorm's statistics are the global batch's on any backend
    (global_batch_norm.py); the expander is never evaluated, so it needs no running ones."""

    def __init__(self, in_dim: int, width: Count = 1024, depth: Count = 3):
        layers: list[nn.Module] = []
        dims = [in_dim] + [width] * depth
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            layers.append(nn.Linear(a, b))
            if i < depth - 1:
                layers += [GlobalBatchNorm1d(b), nn.ReLU(inplace=True)]
        super().__init__(*layers)
