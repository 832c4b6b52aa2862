"""A ViT encoder with a linear head: linear probing (frozen encoder) and fine-tuning.

The I-JEPA paper's evaluation: features are the average-pooled tokens of the last layer,
or of each of the last 4 layers concatenated, of the (EMA) target encoder; a linear head
is trained on top, the encoder frozen (probe) or trained with it (fine-tuning).
"""

import logging
from typing import Literal

import torch
from torch import nn

from trainlab.networks.vit import ViTEncoder
from trainlab.networks.weights import ijepa_parts, load_into, read_state
from trainlab.utils.errors import UserError
from trainlab.utils.ranges import Count

log = logging.getLogger(__name__)


class EncoderClassifier(nn.Module):
    """Args:
    encoder: a ``ViTEncoder`` of the pre-trained shape.
    num_classes: outputs of the linear head.
    pooling: ``avg`` (last layer) or ``avg_last4`` (last 4 layers, 4x the width).
    freeze_encoder: linear probing: no gradients for the encoder, kept in eval mode.
    init_part: which encoder of a weights file ``load_weights`` takes: ``target_encoder`` (EMA, the paper's choice)
        or ``encoder`` (the context encoder).
    head_norm: a BatchNorm without affine parameters before the head (MAE's linear-probe
        recipe, which I-JEPA follows): the head then sees standardised features.
    """

    def __init__(
        self,
        encoder: ViTEncoder,
        num_classes: Count,
        pooling: Literal["avg", "avg_last4"] = "avg",
        freeze_encoder: bool = False,
        init_part: Literal["target_encoder", "encoder"] = "target_encoder",
        head_norm: bool = False,
    ):
        super().__init__()
        self.encoder, self.pooling, self.frozen = encoder, pooling, freeze_encoder
        self.init_part = init_part
        self.feature_dim = encoder.embed_dim * (4 if pooling == "avg_last4" else 1)
        norm = nn.BatchNorm1d(self.feature_dim, affine=False) if head_norm else nn.Identity()
        self.head = nn.Sequential(norm, nn.Linear(self.feature_dim, num_classes))
        if freeze_encoder:
            encoder.requires_grad_(False)

    def load_weights(self, path: str) -> None:
        """The encoder from a trainlab .ckpt, an official I-JEPA .pth.tar or a timm
        ``*_ijepa`` file; the head keeps its fresh initialisation."""
        parts = ijepa_parts(read_state(path))
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
            return self.encoder.pooled(x)
        return torch.cat(self.encoder.pooled_layers(x, 4), dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.frozen and self.encoder.training:
            # A fixed feature extractor: no drop path. Set here, not in train(), because
            # Lightning restores each submodule's mode itself around validation.
            self.encoder.eval()
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.frozen):
            features = self.features(x)  # frozen: no graph kept through the encoder
        return self.head(features)

    def layer_id(self, name: str) -> int:
        """Depth of a parameter for layer-wise LR decay: embeddings 0, block i -> i + 1,
        the final norm and the head depth + 1 (BEiT / MAE)."""
        if name.startswith("encoder.blocks."):
            return int(name.split(".")[2]) + 1
        if name.startswith(("encoder.patch_embed", "encoder.pos_embed", "encoder.cls_token")):
            return 0
        return len(self.encoder.blocks) + 1
