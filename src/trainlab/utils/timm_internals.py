"""The one private name of timm the project uses. Checked on timm 1.0.29 and 1.0.31;
tests/test_library_internals.py fails when it moves."""

import torch

CHECKED_ON = ("1.0.29", "1.0.31")


def add_position_embedding(vit, tokens: torch.Tensor) -> torch.Tensor:
    """A timm VisionTransformer's position step on patch tokens: the table resampled to the
    grid (``dynamic_img_size``) and the prefix tokens, as its own ``forward_features`` does
    between the patch embedding and the blocks; timm has no public name for that step."""
    return vit._pos_embed(tokens)
