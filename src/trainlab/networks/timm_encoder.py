"""Any timm backbone as an encoder, by name: ``timm.create_model(model_name, num_classes=0)``.

A thin door around timm's own factory, written here for two things timm's ``**kwargs``
cannot give: a config's values checked (types and ranges, before torch is imported) and a
name that is not a timm model refused in one line instead of timm's traceback.
"""

from collections.abc import Callable

import timm
from torch import nn

from trainlab.networks.grad_strides import keep_grad_strides
from trainlab.utils.errors import UserError
from trainlab.utils.ranges import Count, DropRate


def timm_encoder(
    model_name: str,
    in_chans: Count = 3,
    drop_path_rate: DropRate = 0.0,
    norm_layer: Callable[..., nn.Module] | None = None,
) -> nn.Module:
    """The timm model ``model_name`` from scratch, without a classifier: its forward gives the
    pooled features (networks/encoder.py). ``norm_layer`` replaces its BatchNorm class (a
    ResNet's: GlobalBatchNorm2d, configs/model/encoder/resnet.yaml); None keeps timm's."""
    if not timm.is_model(model_name):
        raise UserError(
            f"model.encoder.model_name={model_name} is not a timm model: "
            "pick one of timm.list_models(), e.g. resnet18, convnext_atto"
        )
    options = {"norm_layer": norm_layer} if norm_layer is not None else {}
    model = timm.create_model(
        model_name, num_classes=0, in_chans=in_chans, drop_path_rate=drop_path_rate, **options
    )
    return keep_grad_strides(model)  # a clean DDP console for ConvNeXt (grad_strides.py)
