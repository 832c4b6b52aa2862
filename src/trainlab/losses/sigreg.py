"""LeJEPA's SIGReg (Balestriero & LeCun 2025): how far a batch of embeddings is from an
isotropic Gaussian. An optional I-JEPA regulariser (model.sigreg), not in the paper."""

import torch
from torch import nn


class SIGRegLoss(nn.Module):
    """SIGReg on a batch of embeddings (B, D): how far each of ``slices`` random 1-D
    projections is from N(0, 1), by the Epps-Pulley statistic (the squared gap between the
    empirical and the Gaussian characteristic function, weighted by the Gaussian's and
    integrated over t in [-5, 5]), times B, averaged over the projections.
    Written here: no dependency of the template ships it. Directions come from the step's
    generator, so every rank draws the same ones."""

    def __init__(self, slices: int = 256):
        super().__init__()
        self.slices = slices

    def forward(self, z: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        directions = torch.randn(z.shape[1], self.slices, generator=generator).to(z)
        directions = directions / directions.norm(dim=0)
        t = torch.linspace(-5, 5, 17, device=z.device, dtype=z.dtype)
        gaussian_cf = torch.exp(-t.square() / 2)
        angles = (z @ directions).unsqueeze(-1) * t  # (B, slices, 17)
        gap = (angles.cos().mean(0) - gaussian_cf).square() + angles.sin().mean(0).square()
        return torch.trapezoid(gap * gaussian_cf, t, dim=-1).mean() * len(z)
