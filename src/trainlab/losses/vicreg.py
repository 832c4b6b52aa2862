"""VICReg's loss (Bardes et al. 2022) on the embeddings of two views of a batch: invariance
(their mean squared distance), and the variance and covariance of each view. As the paper's
Algorithm 1 and the official main_vicreg.py: the two views' variance terms averaged, their
covariance terms summed."""

import torch
import torch.nn.functional as F
from torch import nn

from trainlab.losses.variance_covariance import covariance, variance


class VICRegLoss(nn.Module):
    """Weighted sum of the three terms (the paper's weights: 25, 25, 1), in float32; returns
    the loss and the unweighted terms, for the log."""

    def __init__(self, invariance: float = 25.0, variance: float = 25.0, covariance: float = 1.0):
        super().__init__()
        self.weights = {"invariance": invariance, "variance": variance, "covariance": covariance}

    def forward(
        self, z1: torch.Tensor, z2: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        z1, z2 = z1.float(), z2.float()
        c1, c2 = z1 - z1.mean(dim=0), z2 - z2.mean(dim=0)
        terms = {
            "invariance": F.mse_loss(z1, z2),
            "variance": (variance(c1) + variance(c2)) / 2,
            "covariance": covariance(c1) + covariance(c2),
        }
        w = self.weights
        loss = (
            w["invariance"] * terms["invariance"]
            + w["variance"] * terms["variance"]
            + w["covariance"] * terms["covariance"]
        )
        return loss, terms
