"""Projection heads of joint-embedding methods: an MLP to a bottleneck, then (DINO, SwAV) a
weight-normalised prototype layer, its rows of norm 1.

As DINO's ``DINOHead`` and lightly's ``DINOProjectionHead``: the prototype layer is torch's
weight_norm parametrisation with the norm fixed at 1 (``norm_last_layer``), which keeps the
output scale fixed and, in DINO's experiments, training stable.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from trainlab.networks.global_batch_norm import GlobalBatchNorm1d
from trainlab.utils.ranges import Count


class ProjectionHead(nn.Module):
    """(B, in_dim) -> (B, out_dim): ``layers`` linear layers (GELU between, after a BatchNorm
    over the global batch with ``batch_norm``, as DINO's ``use_bn``) to ``bottleneck``,
    L2-normalised, then the prototypes."""

    def __init__(
        self,
        in_dim: int,
        out_dim: Count = 1024,
        hidden: Count = 512,
        bottleneck: Count = 128,
        layers: Count = 3,
        norm_last_layer: bool = True,
        batch_norm: bool = False,
    ):
        super().__init__()
        widths = [in_dim, *[hidden] * (layers - 1), bottleneck]
        mlp: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(widths, widths[1:], strict=False)):
            mlp.append(nn.Linear(a, b))
            if i < layers - 1:
                # Statistics of the global batch only (global_batch_norm.py): no state that a
                # forward moves, and 2 ranks normalise as one process would.
                norm = GlobalBatchNorm1d(b) if batch_norm else None
                mlp += [norm, nn.GELU()] if norm else [nn.GELU()]
        self.mlp = nn.Sequential(*mlp)
        for layer in self.mlp:
            if isinstance(layer, nn.Linear):
                nn.init.trunc_normal_(layer.weight, std=0.02)
                nn.init.zeros_(layer.bias)
        self.prototypes = weight_norm(nn.Linear(bottleneck, out_dim, bias=False))
        row_norm = self.prototypes.parametrizations.weight.original0
        with torch.no_grad():
            row_norm.fill_(1.0)
        row_norm.requires_grad_(not norm_last_layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.prototypes(F.normalize(self.mlp(x), dim=-1))
