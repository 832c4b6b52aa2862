"""The benchmarks' I-JEPA, built the same way for every table (CPU and GPU) from its shapes."""

from functools import partial

import torch

from trainlab.model.ijepa import IJEPA
from trainlab.networks.multiblock_masks import MultiBlockMaskGenerator
from trainlab.networks.predictor import Predictor
from trainlab.networks.vit import ViTEncoder


def make_ijepa(
    encoder: dict,
    predictor: tuple[int, int, int] = (96, 2, 4),
    min_keep: int = 4,
    grad_checkpointing: bool = False,
    fixed_shapes: int | None = None,
) -> IJEPA:
    """``encoder``: ViTEncoder's keyword arguments; ``predictor``: (width, depth, heads).
    ``fixed_shapes``: the masks' (masks.py). Seeded, so every variant of a table starts from
    the same weights."""
    torch.manual_seed(0)
    width, depth, heads = predictor
    return IJEPA(
        ViTEncoder(**encoder, grad_checkpointing=grad_checkpointing),
        partial(
            Predictor,
            pred_dim=width,
            depth=depth,
            num_heads=heads,
            grad_checkpointing=grad_checkpointing,
        ),
        partial(MultiBlockMaskGenerator, min_keep=min_keep, fixed_shapes=fixed_shapes),
        optimizer=partial(torch.optim.AdamW, lr=1e-3),
        num_classes=10,
    )
