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


def layer_decay_groups(
    module: nn.Module, layer_id, num_layers: int, layer_decay: float, prefix: str = ""
) -> list[dict]:
    """``decay_groups`` split per depth, each with ``lr_scale = layer_decay ** (num_layers
    - depth)``: the head learns at the full rate, each block below it ``layer_decay`` times
    slower (layer-wise LR decay, BEiT / MAE fine-tuning). ``layer_id(name)`` gives a
    parameter's depth in 0..num_layers (timm's ``group_matcher`` of the encoder:
    EncoderClassifier.layer_id). timm's ``param_groups_layer_decay`` does this for a timm
    model alone; the classifier here is an encoder and a head of its own."""
    groups: dict[tuple[int, bool], dict] = {}
    for name, param in module.named_parameters():
        if not param.requires_grad:
            continue
        depth, decay = layer_id(name), param.ndim > 1
        group = groups.setdefault(
            (depth, decay),
            {
                "params": [],
                "name": f"{prefix}layer{depth}_{'decay' if decay else 'no_decay'}",
                "lr_scale": layer_decay ** (num_layers - depth),
                "decay": decay,
                **({} if decay else {"weight_decay": 0.0}),
            },
        )
        group["params"].append(param)
    return [groups[key] for key in sorted(groups)]
