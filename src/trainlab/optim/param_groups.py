"""Parameter groups: weight decay on parameters of 2 or more dimensions only, never on biases
or norms (1-D). Tokens of shape (1, 1, D), such as the predictor's mask token, count as 3-D
and are decayed, as in the reference I-JEPA code."""

from timm.optim import param_groups_weight_decay
from torch import nn


def decay_groups(module: nn.Module, prefix: str = "") -> list[dict]:
    """timm's split (``param_groups_weight_decay``: biases and 1-D parameters undecayed) as
    two AdamW groups named ``<prefix>decay`` and ``<prefix>no_decay``, decayed first (the order
    of the checkpoints' optimizer state), flagged for the per-step schedule, which sets the
    decayed group's weight_decay itself; ``no_decay`` keeps 0 whatever the schedule says."""
    no_decay, decay = param_groups_weight_decay(module, weight_decay=1.0)  # 1.0: any non-zero
    return [
        {"params": decay["params"], "name": f"{prefix}decay", "decay": True},
        {
            "params": no_decay["params"],
            "name": f"{prefix}no_decay",
            "weight_decay": 0.0,
            "decay": False,
        },
    ]
