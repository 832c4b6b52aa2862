"""The I-JEPA ViT encoder: timm's VisionTransformer with no class token, fixed 2-D sin-cos
positions, average pooling, and a forward that keeps only the tokens it is told to keep.

Its state_dict has timm's key names, so an exported encoder loads into
``timm.create_model("vit_huge_patch14_gap_224", num_classes=0)`` as it is.
"""

from typing import Literal

import torch
from timm.layers.pos_embed_sincos import build_sincos2d_pos_embed
from timm.models.vision_transformer import VisionTransformer
from torch.utils.checkpoint import checkpoint

from trainlab.networks.patch_stem import patch_embed_layer
from trainlab.utils import torch_internals
from trainlab.utils.errors import ConfigError
from trainlab.utils.ranges import Count, DropRate, Positive
from trainlab.utils.timm_internals import add_position_embedding

# name: (embed_dim, depth, num_heads, mlp_ratio), as in timm and the I-JEPA paper.
VIT_SIZES = {
    "vit_tiny": (192, 12, 3, 4.0),
    "vit_small": (384, 12, 6, 4.0),
    "vit_base": (768, 12, 12, 4.0),
    "vit_large": (1024, 24, 16, 4.0),
    "vit_huge": (1280, 32, 16, 4.0),
    "vit_giant": (1408, 40, 16, 48 / 11),
}
VitSize = Literal[tuple(VIT_SIZES)]  # a config naming another size is refused with the list


def gather_tokens(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Tokens ``x[b, index[b, ...]]``: x (B, N, D), index (B, *S) -> (B, *S, D)."""
    flat = index.reshape(index.shape[0], -1)
    out = torch.gather(x, 1, flat.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
    return out.reshape(*index.shape, x.shape[-1])


def run_blocks(
    blocks: torch.nn.ModuleList, x: torch.Tensor, checkpointing: bool, **kwargs
) -> torch.Tensor:
    """The blocks in order, each called as ``block(x, **kwargs)``; with ``checkpointing`` each
    block's activations are recomputed in the backward pass instead of kept (memory for
    compute). Encoder and predictor share it.

    The token count is marked dynamic for torch.compile: I-JEPA's and MAE's masks change it
    every step, and one graph of each block then serves every count (compiler/regional.py)."""
    if not torch.compiler.is_compiling():  # marking is for the caller of a compiled region
        torch_internals.maybe_mark_dynamic(x, 1)
    for block in blocks:
        if checkpointing:
            x = checkpoint(block, x, use_reentrant=False, **kwargs)
        else:
            x = block(x, **kwargs)
    return x


def require_tokens(encoder: torch.nn.Module, method: str) -> None:
    """Refuse, in one line, an encoder whose tokens cannot be masked (a CNN) for a method
    that masks them."""
    if not isinstance(encoder, ViTEncoder):
        raise ConfigError(
            f"model.encoder builds a {type(encoder).__name__}, but {method} masks a ViT's "
            "tokens: use model/encoder=vit (the project's ViT, networks/vit.py)"
        )


def sincos_pos_embed(grid: tuple[int, int], dim: int) -> torch.Tensor:
    """Fixed 2-D sin-cos position table, shaped (1, H*W, dim) like timm's ``pos_embed``."""
    return build_sincos2d_pos_embed(list(grid), dim=dim).reshape(1, grid[0] * grid[1], dim)


class ViTEncoder(VisionTransformer):
    """A ViT whose ``forward_features(x, keep)`` runs only the patch tokens in ``keep``. It
    takes any image size that its patch divides (``img_size`` sets the grid of the masks).

    ``keep`` is a (B, K) tensor of token indices (row-major over the patch grid); the
    position table is frozen (a parameter without grad, as in the official checkpoints).
    """

    def __init__(
        self,
        img_size: Count = 224,
        patch_size: Count = 16,
        in_chans: Count = 3,
        size: VitSize = "vit_base",
        depth: Count | None = None,
        drop_path_rate: DropRate = 0.0,
        init_values: Positive | None = None,
        grad_checkpointing: bool = False,
        stem_width: Count | None = None,
    ):
        """``size`` names a width/depth/heads preset of VIT_SIZES; ``depth`` overrides its depth
        (small data sets on a CPU train a shallower stack of the same width). ``stem_width``
        embeds each patch by a small CNN of that many channels (patch_stem.py) instead of
        timm's linear map."""
        embed_dim, preset_depth, num_heads, mlp_ratio = VIT_SIZES[size]
        depth = depth or preset_depth
        super().__init__(
            img_size=img_size,
            patch_size=patch_size,
            in_chans=in_chans,
            num_classes=0,
            global_pool="avg",
            class_token=False,
            fc_norm=False,
            embed_dim=embed_dim,
            depth=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            drop_path_rate=drop_path_rate,
            init_values=init_values,
            fix_init=True,
            embed_layer=patch_embed_layer(stem_width),
            # Any image size a multiple of the patch (multi-crop's small views): timm's own
            # path, which resamples the position table to the grid it is given (unchanged at
            # img_size) in _pos_embed, also inside forward_intermediates and under FSDP.
            dynamic_img_size=True,
        )
        self.grid = self.patch_embed.grid_size
        self.pos_embed.requires_grad_(False)
        with torch.no_grad():
            self.pos_embed.copy_(sincos_pos_embed(self.grid, embed_dim))
        self.grad_checkpointing = grad_checkpointing

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    def forward_features(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        x = add_position_embedding(self, self.patch_embed(x))
        if keep is not None:
            x = gather_tokens(x, keep)
        x = self.norm_pre(x)
        x = run_blocks(self.blocks, x, self.grad_checkpointing and self.training)
        return self.norm(x)

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """timm's contract (networks/encoder.py): one average-pooled vector per image (B, D).
        With ``keep``, the kept tokens themselves (B, K, D): I-JEPA's and MAE's context."""
        tokens = self.forward_features(x, keep)
        return tokens if keep is not None else tokens.mean(dim=1)

    def forward_intermediates(self, x: torch.Tensor, indices=None, output_fmt="NLC", **kwargs):
        """timm's, with tokens (NLC) by default instead of a grid: the layout this encoder
        computes in, so pooling them averages the tokens as the final pooling does."""
        return super().forward_intermediates(x, indices, output_fmt=output_fmt, **kwargs)
