"""Parameter groups: weight decay on weight matrices only, never on biases, norms or tokens."""

from torch import nn


def decay_groups(module: nn.Module, prefix: str = "") -> list[dict]:
    """Two AdamW groups named ``<prefix>decay`` and ``<prefix>no_decay``; the latter
    (biases, 1-D params) keeps weight_decay 0 whatever the schedule says."""
    decay, no_decay = [], []
    for _, param in module.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim <= 1 else decay).append(param)
    return [
        {"params": decay, "name": f"{prefix}decay", "decay": True},
        {"params": no_decay, "name": f"{prefix}no_decay", "weight_decay": 0.0, "decay": False},
    ]
