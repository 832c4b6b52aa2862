"""A small convolutional network: the quick classifier backbone for small images."""

import torch
from torch import nn

from trainlab.utils.ranges import Count


class ConvNet(nn.Module):
    """Conv-BN-ReLU stages, each halving the resolution, then global average pooling.

    ``num_classes=0`` returns the pooled features (``num_features`` wide) instead of logits.
    """

    def __init__(
        self,
        in_chans: Count = 3,
        num_classes: Count = 10,
        widths: tuple[Count, ...] = (32, 64, 128),
    ):
        super().__init__()
        layers, prev = [], in_chans
        for width in widths:
            layers += [
                nn.Conv2d(prev, width, 3, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            prev = width
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.num_features = prev
        self.head = nn.Linear(prev, num_classes) if num_classes else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))
