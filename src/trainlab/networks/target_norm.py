"""How I-JEPA's regression target is normalised (model.target_norm): each token over its
channels (the paper), each channel over the batch's tokens, or not at all. On mnist5k
``channel`` read level with ``layer`` (research/ijepa_recipe_search.md)."""

import torch
import torch.nn.functional as F


def normalise_tokens(x: torch.Tensor) -> torch.Tensor:
    """Each token of (B, N, D) over its channels (a layer norm without weights): the paper."""
    return F.layer_norm(x, x.shape[-1:])


def standardise_channels(x: torch.Tensor) -> torch.Tensor:
    """Each channel of (B, N, D) to zero mean and unit variance over the batch's tokens (this
    rank's)."""
    flat = x.reshape(-1, x.shape[-1]).float()
    scale = torch.rsqrt(flat.var(dim=0, unbiased=False) + 1e-6)
    return ((x - flat.mean(dim=0)) * scale).to(x.dtype)


def unnormalised(x: torch.Tensor) -> torch.Tensor:
    return x


# model.target_norm. Named functions, not lambdas: a module that spawns ranks is pickled.
TARGET_NORMS = {"layer": normalise_tokens, "channel": standardise_channels, "none": unnormalised}
