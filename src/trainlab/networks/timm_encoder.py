"""Any timm backbone as an encoder, by name: ``timm.create_model(model_name, num_classes=0)``.

A thin door around timm's own factory, written here for two things timm's ``**kwargs``
cannot give: a config's values checked (types and ranges, before anything is built) and a
name that is not a timm model refused in one line instead of timm's traceback.
"""

from collections.abc import Callable
from typing import Literal

import timm
from timm.models import get_pretrained_cfg
from torch import nn

from trainlab.networks.global_batch_norm import per_rank_batch_norms, to_global_batch_norm
from trainlab.networks.grad_strides import keep_grad_strides
from trainlab.utils.errors import UserError
from trainlab.utils.logging import get_logger
from trainlab.utils.ranges import Count, DropRate

log = get_logger(__name__)


def timm_encoder(
    model_name: str,
    in_chans: Count = 3,
    drop_path_rate: DropRate = 0.0,
    batch_norm: Literal["global", "per_rank"] = "global",
    norm_layer: Callable[..., nn.Module] | None = None,
    img_size: Count | None = None,
) -> nn.Module:
    """The timm model ``model_name`` from scratch, without a classifier: its forward gives the
    pooled features (networks/encoder.py). ``batch_norm="global"``: every BatchNorm, timm's
    ``BatchNormAct2d`` included, normalises over the global batch (networks/global_batch_norm.py),
    so N ranks train as one process; ``"per_rank"`` keeps timm's. ``norm_layer`` is passed to
    timm's factory as it is (a norm class of your own); None keeps timm's. ``img_size``: the
    input size, given to the models timm builds for one size (``fixed_input_size`` in their
    timm config: ViTs, Swin), so ``vit_small_patch16_224`` trains at 96 px; a CNN takes any
    size and is built without it."""
    if not timm.is_model(model_name):
        raise UserError(
            f"model.encoder.model_name={model_name} is not a timm model: "
            "pick one of timm.list_models(), e.g. resnet18, convnext_atto"
        )
    options = {"norm_layer": norm_layer} if norm_layer is not None else {}
    if img_size is not None and getattr(get_pretrained_cfg(model_name), "fixed_input_size", 0):
        options["img_size"] = img_size
    model = timm.create_model(
        model_name, num_classes=0, in_chans=in_chans, drop_path_rate=drop_path_rate, **options
    )
    if batch_norm == "global":
        to_global_batch_norm(model)
    elif per_rank := per_rank_batch_norms(model):
        log.info(
            f"model.encoder.batch_norm=per_rank: {len(per_rank)} BatchNorms of {model_name} "
            "normalise each rank's own rows"
        )
    return keep_grad_strides(model)  # a clean DDP console for ConvNeXt (grad_strides.py)
