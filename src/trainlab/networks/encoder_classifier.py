"""An encoder with a linear head: linear probing (frozen encoder) and fine-tuning.

The I-JEPA paper's evaluation: features are the average-pooled outputs of the last layer,
or of each of the last 4 layers concatenated, of the evaluated network (I-JEPA's EMA target
encoder); a linear head is trained on top, the encoder frozen (probe) or trained with it
(fine-tuning). Any encoder of timm's contract (networks/encoder.py): a ViT, a ResNet, ...
"""

import logging
from typing import Literal

import torch
from timm.models import group_parameters
from torch import nn

from trainlab.networks.encoder import layer_widths, pooled_layers, probe_layers
from trainlab.networks.weights import load_into, network_parts, read_state
from trainlab.utils.errors import UserError
from trainlab.utils.ranges import Count

log = logging.getLogger(__name__)


class EncoderClassifier(nn.Module):
    """Args:
    encoder: an encoder of the pre-trained shape (a timm model or the project's ViT).
    num_classes: outputs of the linear head.
    pooling: ``avg`` (last layer) or ``avg_last4`` (last 4 layers, concatenated).
    freeze_encoder: linear probing: no gradients for the encoder, kept in eval mode.
    init_part: which network of a weights file ``load_weights`` takes: ``evaluated`` (the one
        the method rates: I-JEPA's and DINO's EMA target, VICReg's encoder), ``target_encoder``
        or ``encoder`` (I-JEPA's context encoder).
    head_norm: a BatchNorm without affine parameters before the head (MAE's linear-probe
        recipe, which I-JEPA follows): the head then sees standardised features.
    """

    def __init__(
        self,
        encoder: nn.Module,
        num_classes: Count,
        pooling: Literal["avg", "avg_last4"] = "avg",
        freeze_encoder: bool = False,
        init_part: Literal["evaluated", "target_encoder", "encoder"] = "evaluated",
        head_norm: bool = False,
    ):
        super().__init__()
        self.encoder, self.pooling, self.frozen = encoder, pooling, freeze_encoder
        self.init_part = init_part
        self.layers = probe_layers(encoder) if pooling == "avg_last4" else 1
        self.feature_dim = sum(layer_widths(encoder, self.layers))
        norm = nn.BatchNorm1d(self.feature_dim, affine=False) if head_norm else nn.Identity()
        self.head = nn.Sequential(norm, nn.Linear(self.feature_dim, num_classes))
        if freeze_encoder:
            encoder.requires_grad_(False)

    def load_weights(self, path: str) -> None:
        """The encoder from a trainlab .ckpt, an official I-JEPA .pth.tar or a timm
        ``*_ijepa`` file; the head keeps its fresh initialisation."""
        parts = network_parts(read_state(path))
        if self.init_part not in parts and "encoder" in parts:  # MAE, or any one-encoder file
            log.warning(f"{path} holds no {self.init_part}: loading its encoder instead")
            self.init_part = "encoder"
        if self.init_part not in parts:
            raise UserError(
                f"{path} holds no {self.init_part} (it has {', '.join(parts) or 'none'}): "
                "set model.net.init_part to one of those"
            )
        load_into(self.encoder, parts[self.init_part], self.init_part)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        if self.pooling == "avg":
            return self.encoder(x)
        return torch.cat(pooled_layers(self.encoder, x, self.layers), dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.frozen and self.encoder.training:
            # A fixed feature extractor: no drop path. Set here, not in train(), because
            # Lightning restores each submodule's mode itself around validation.
            self.encoder.eval()
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.frozen):
            features = self.features(x)  # frozen: no graph kept through the encoder
        return self.head(features)

    def layer_id(self, name: str) -> int:
        """Depth of a parameter for layer-wise LR decay, from timm's own grouping of the
        encoder (``group_matcher``: a ViT's embeddings 0, block i -> i + 1 with the final
        norm in the last; a CNN's stem, then each block); the head one above the encoder."""
        if not hasattr(self, "_layer_of"):
            matcher = self.encoder.group_matcher(coarse=False)
            self._layer_of = group_parameters(self.encoder, matcher, reverse=True)
        key = name.removeprefix("encoder.")
        return self._layer_of[key] if key in self._layer_of else max(self._layer_of.values()) + 1
