"""Frozen features of every image of a split, computed once with the evaluation transform."""

from collections.abc import Callable

import torch
from rich.progress import track
from torch.utils.data import DataLoader, Dataset

Views = Callable[[torch.Tensor], dict[str, torch.Tensor]]
#: The I-JEPA paper's probe reads the last 4 blocks (the online monitors read the same).
PROBE_BLOCKS = 4


def pixel_views(images: torch.Tensor) -> dict[str, torch.Tensor]:
    """The raw-pixel baseline: the normalised image, flattened."""
    return {"pixels": images.flatten(1)}


def encoder_views(encoder: torch.nn.Module) -> Views:
    """Average-pooled tokens of the last block and of the last 4 blocks concatenated, each
    after the encoder's final norm (the I-JEPA paper's probe features)."""
    n = min(PROBE_BLOCKS, len(encoder.blocks))

    def views(images: torch.Tensor) -> dict[str, torch.Tensor]:
        pooled = encoder.pooled_layers(images, n)
        return {"last": pooled[-1], f"last{n}": torch.cat(pooled, dim=1)}

    return views


@torch.no_grad()
def extract(
    views: Views, dataset: Dataset, batch_size: int = 256, desc: str = "features"
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """({view: (N, D) float32}, labels (N,)) over a whole data set of (image, label)."""
    out: dict[str, list[torch.Tensor]] = {}
    labels = []
    loader = DataLoader(dataset, batch_size=batch_size)
    for images, y in track(loader, description=desc, transient=True):
        for name, feats in views(images).items():
            out.setdefault(name, []).append(feats.float())
        labels.append(torch.as_tensor(y))
    return {k: torch.cat(v) for k, v in out.items()}, torch.cat(labels)


def standardised(views: dict[str, dict[str, torch.Tensor]]) -> dict[str, dict[str, torch.Tensor]]:
    """Each view as it is and standardised with its train statistics (``<view>+bn``): what a
    BatchNorm without affine parameters in front of the head computes at evaluation."""
    out = dict(views)
    for name, splits in views.items():
        mean, std = splits["train"].mean(dim=0), splits["train"].std(dim=0) + 1e-6
        out[f"{name}+bn"] = {s: (x - mean) / std for s, x in splits.items()}
    return out
