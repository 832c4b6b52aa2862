"""Layer-wise learning-rate decay (BEiT, MAE fine-tuning): each depth its own parameter
groups, the head at the full rate and each block below it slower."""

from torch import nn


def layer_decay_groups(
    module: nn.Module, layer_id, num_layers: int, layer_decay: float, prefix: str = ""
) -> list[dict]:
    """The split of optim/param_groups.py's ``decay_groups``, per depth, each group with
    ``lr_scale = layer_decay ** (num_layers - depth)``. ``layer_id(name)`` gives a parameter's
    depth in 0..num_layers (timm's ``group_matcher`` of the encoder: EncoderClassifier.layer_id).
    timm's ``param_groups_layer_decay`` does this for a timm model alone; the classifier here
    is an encoder and a head of its own."""
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
