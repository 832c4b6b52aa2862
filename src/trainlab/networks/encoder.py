"""The encoder contract is timm's: any ``timm.create_model(name, num_classes=0)`` (ResNet,
ConvNeXt, EfficientNet, ViT, ...) or the project's ``ViTEncoder`` is an encoder. An encoder
of your own needs these five, which is all the project reads (tests/test_encoders.py trains,
rates and exports one written to this list alone):

- ``encoder(images)``: one pooled vector per image (B, width), timm's forward without a
  classifier;
- ``encoder.num_features``: that width (timm's ``head_hidden_size`` instead, where a model
  has one that differs: MobileNetV3's conv head; ``pooled_width``);
- ``encoder.forward_intermediates(images, indices=n, norm=True, intermediates_only=True)``:
  a list of the outputs of the last n stages (a CNN) or blocks (a ViT), NCHW or tokens;
- ``encoder.forward_intermediates(images, indices=n, norm=True)``: ``(final, that list)``,
  ``final`` the last stage's output before pooling, and
  ``encoder.forward_head(final, pre_logits=True)``: the pooled vector of ``encoder(images)``
  from it (one forward for both: ``pooled_and_layers``);
- ``encoder.feature_info``: one entry per stage or block, with its width (``num_chs``).

The methods, the online monitors, the frozen-feature protocol, the probe and fine-tuning
read an encoder through the functions below and nothing else; only the masked methods
(I-JEPA, MAE), which work on a ViT's tokens by nature, read ViT attributes.
"""

import torch
from torch import nn

#: The I-JEPA paper's probe reads the last 4 blocks; the monitors and the protocol's
#: ``last4`` view read the last 4 stages or blocks of any encoder.
PROBE_LAYERS = 4


def pooled_width(encoder: nn.Module) -> int:
    """The width of ``encoder(images)``: a head's input width."""
    return getattr(encoder, "head_hidden_size", None) or encoder.num_features


def layer_count(encoder: nn.Module) -> int:
    """How many stages (a CNN) or blocks (a ViT) ``forward_intermediates`` can return."""
    return len(encoder.feature_info)


def probe_layers(encoder: nn.Module) -> int:
    """How many last layers the monitors and the protocol's ``last4`` view pool."""
    return min(PROBE_LAYERS, layer_count(encoder))


def layer_widths(encoder: nn.Module, n: int) -> list[int]:
    """Widths of the last ``n`` stages or blocks, in order."""
    return [info["num_chs"] for info in encoder.feature_info[-n:]]


def average_pool(x: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) or (B, N, D) tokens -> (B, C or D)."""
    return x.mean(dim=(2, 3)) if x.ndim == 4 else x.mean(dim=1)


def pooled_layers(encoder: nn.Module, images: torch.Tensor, n: int) -> list[torch.Tensor]:
    """The average-pooled outputs (B, width) of the last ``n`` stages or blocks, the last
    after the encoder's final norm where it has one (the I-JEPA paper's probe features)."""
    layers = encoder.forward_intermediates(images, indices=n, norm=True, intermediates_only=True)
    return [average_pool(x) for x in layers]


def pooled_and_layers(
    encoder: nn.Module, images: torch.Tensor, n: int
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One forward for both: ``encoder(images)`` (the pooled vector, through the encoder's own
    head, e.g. ConvNeXt's norm) and ``pooled_layers(encoder, images, n)``."""
    final, layers = encoder.forward_intermediates(images, indices=n, norm=True)
    return encoder.forward_head(final, pre_logits=True), [average_pool(x) for x in layers]
