"""LeJEPA's SIGReg (Balestriero & LeCun 2025): how far a batch of embeddings is from an
isotropic Gaussian. LeJEPA's regulariser (losses/lejepa.py), and an optional one of I-JEPA
(model.sigreg), not in its paper."""

import torch
from torch import nn


class SIGRegLoss(nn.Module):
    """SIGReg on a batch of embeddings (B, D), or on several (..., B, D) with one set of
    directions: how far each of ``slices`` random 1-D projections is from N(0, 1), by the
    Epps-Pulley statistic (the squared gap between the empirical and the Gaussian
    characteristic function, weighted by the Gaussian's and integrated over t in [-5, 5] at
    17 knots), times B, averaged over the projections (and the batches).
    Written here: no dependency of the template ships it. Directions come from the step's
    generator, so every rank draws the same ones."""

    def __init__(self, slices: int = 256):
        super().__init__()
        self.slices = slices

    def forward(self, z: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        directions = torch.randn(z.shape[-1], self.slices, generator=generator).to(z)
        directions = directions / directions.norm(dim=0)
        t = torch.linspace(-5, 5, 17, device=z.device, dtype=z.dtype)
        gaussian_cf = torch.exp(-t.square() / 2)
        angles = (z @ directions).unsqueeze(-1) * t  # (..., B, slices, 17)
        gap = (angles.cos().mean(-3) - gaussian_cf).square() + angles.sin().mean(-3).square()
        return torch.trapezoid(gap * gaussian_cf, t, dim=-1).mean() * z.shape[-2]
