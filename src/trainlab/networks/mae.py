"""MAE's networks (He et al. 2022) on trainlab's ViT: random patch masks and a pixel decoder.

The decoder is I-JEPA's predictor with a pixel head: both fill mask tokens at given grid
positions next to encoded visible tokens and run a narrow ViT over them.
"""

import torch
from torch import nn

from trainlab.networks.predictor import Predictor
from trainlab.networks.token_masks import Masks


def random_masks(
    batch_size: int, generator: torch.Generator, num_patches: int, mask_ratio: float
) -> Masks:
    """A random ``1 - mask_ratio`` of the patches visible per image (at least one), the rest
    one target set: ``Masks(context (B, K), targets (B, 1, N - K))``, indices sorted."""
    keep = min(num_patches - 1, max(1, round(num_patches * (1 - mask_ratio))))
    order = torch.rand(batch_size, num_patches, generator=generator).argsort(dim=1)
    context = order[:, :keep].sort(dim=1).values
    targets = order[:, keep:].sort(dim=1).values
    return Masks(context, targets.unsqueeze(1))


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, N, patch * patch * C), tokens row-major as the ViT's grid."""
    B, C, H, W = images.shape
    x = images.reshape(B, C, H // patch, patch, W // patch, patch)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(B, (H // patch) * (W // patch), -1)


class PixelDecoder(Predictor):
    """Encoded visible tokens + mask tokens -> the pixels of the masked patches."""

    def __init__(self, grid, embed_dim: int, patch_size: int, in_chans: int, **predictor):
        super().__init__(grid, embed_dim, **predictor)
        self.proj = nn.Linear(self.proj.in_features, patch_size * patch_size * in_chans)
        self._init(self.proj)
