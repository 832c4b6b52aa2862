"""LeJEPA's loss (Balestriero & LeCun 2025, arXiv 2511.08544, Algorithm 1): every view's
embedding predicts the mean embedding of the image's global views (their mean squared
distance), and SIGReg pulls each view's embeddings toward an isotropic Gaussian; one
trade-off weight between them. No stop-gradient: the centres train too."""

import torch
from torch import nn

from trainlab.losses.sigreg import SIGRegLoss


class LeJEPALoss(nn.Module):
    """``(1 - sigreg_weight) * prediction + sigreg_weight * sigreg`` on the embeddings of V
    views of B images, (V, B, K), the ``global_views`` first; in float32. Returns the loss and
    the two unweighted terms, for the log."""

    def __init__(self, sigreg_weight: float = 0.02, slices: int = 1024, global_views: int = 2):
        super().__init__()
        self.weight, self.global_views = sigreg_weight, global_views
        self.sigreg = SIGRegLoss(slices)

    def forward(
        self, z: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        z = z.float()
        centres = z[: self.global_views].mean(0)
        terms = {
            "prediction": (centres - z).square().mean(),
            "sigreg": self.sigreg(z, generator),  # one set of directions for every view
        }
        loss = (1 - self.weight) * terms["prediction"] + self.weight * terms["sigreg"]
        return loss, terms
