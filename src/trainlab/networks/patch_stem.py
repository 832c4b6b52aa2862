"""A convolutional patch embedding that never looks across patch borders.

Small images give a ViT little to learn its local filters from, and early convolutions help
it (Xiao et al. 2021, "Early convolutions help transformers see better"). A convolutional
stem run over the whole image would let every token see its neighbours' pixels, and I-JEPA
would then read the masked targets' borders through the context tokens. This stem runs a
small CNN inside each patch on its own (zero padding at the patch's edge), so a token holds
its own pixels only, as timm's linear patch embedding does. timm's ``HybridEmbed`` runs its
backbone over the whole image, hence this module.
"""

from functools import partial

import torch
import torch.nn.functional as F
from timm.layers import PatchEmbed
from torch import nn

# Up to this patch side a conv layer runs as one dense matrix product (``conv_as_matrix``).
MATRIX_MAX_PATCH = 8


def conv_as_matrix(conv: nn.Conv2d, p: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``conv`` (stride 1, "same" padding) on a p x p map as the dense matrix W and bias b with
    ``conv(x).flatten(1) == x.flatten(1) @ W + b``: the conv applied to each basis image, so its
    gradient reaches ``conv.weight``. Why: on a CPU, Conv2d's backward over thousands of 7x7
    maps takes 1.5x the time of this matmul (37 against 24 ms forward and backward for a batch
    of 64 digits, 16 channels, medians side by side), although the matmul does p*p/9 times
    the FLOPs; larger patches keep the convs (``MATRIX_MAX_PATCH``: not measured there)."""
    n = conv.in_channels * p * p
    basis = torch.eye(n, dtype=conv.weight.dtype, device=conv.weight.device)
    weight = F.conv2d(basis.view(n, conv.in_channels, p, p), conv.weight, padding=conv.padding)
    return weight.view(n, -1), conv.bias.repeat_interleave(p * p)


class PatchCNN(nn.Module):
    """(B, C, H, W) -> (B, D, H/p, W/p): two 3x3 conv layers inside each p x p patch, then a
    p x p convolution to the embedding width (the linear patch embedding on the CNN's maps).
    ``in_channels`` / ``out_channels`` are named as on the Conv2d it replaces, which callers read."""

    def __init__(self, in_chans: int, embed_dim: int, patch_size: int, width: int):
        super().__init__()
        self.patch_size, self.in_channels, self.out_channels = patch_size, in_chans, embed_dim
        self.convs = nn.Sequential(
            nn.Conv2d(in_chans, width, 3, padding=1),
            nn.GELU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.GELU(),
        )
        self.proj = nn.Conv2d(width, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        p = self.patch_size
        gh, gw = h // p, w // p
        patches = x.unfold(2, p, p).unfold(3, p, p)  # (B, C, gh, gw, p, p)
        patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(b * gh * gw, c, p, p)
        if p <= MATRIX_MAX_PATCH:
            tokens = self.as_matrices(patches.flatten(1))
        else:
            tokens = self.proj(self.convs(patches))  # (B * gh * gw, D, 1, 1)
        return tokens.reshape(b, gh, gw, -1).permute(0, 3, 1, 2)

    def as_matrices(self, patches: torch.Tensor) -> torch.Tensor:
        """The same function on flattened patches (N, C*p*p) -> (N, D), each layer one matmul."""
        h = patches
        for conv, activation in zip(self.convs[::2], self.convs[1::2], strict=True):
            weight, bias = conv_as_matrix(conv, self.patch_size)
            h = activation(torch.addmm(bias, h, weight))
        return F.linear(h, self.proj.weight.flatten(1), self.proj.bias)


class ConvPatchEmbed(PatchEmbed):
    """timm's ``PatchEmbed`` (same attributes, same output) with ``PatchCNN`` as its
    projection; ``width`` is the CNN's channel count."""

    def __init__(self, *args, width: int = 32, **kwargs):
        super().__init__(*args, **kwargs)
        self.proj = PatchCNN(
            self.proj.in_channels, self.proj.out_channels, self.patch_size[0], width
        )


def patch_embed_layer(stem_width: int | None):
    """The ``embed_layer`` for timm's VisionTransformer: its linear patch embedding for None."""
    return PatchEmbed if not stem_width else partial(ConvPatchEmbed, width=stem_width)
