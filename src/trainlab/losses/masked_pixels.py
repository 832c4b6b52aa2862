"""MAE's loss (He et al. 2022): the mean squared error on the pixels of the masked patches,
each target patch standardised first when ``norm_pix`` (the paper's default)."""

import torch
import torch.nn.functional as F
from torch import nn


class MaskedPixelLoss(nn.Module):
    def __init__(self, norm_pix: bool = True):
        super().__init__()
        self.norm_pix = norm_pix

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``pred`` and ``target``: (B, masked patches, patch pixels)."""
        if self.norm_pix:
            target = F.layer_norm(target, target.shape[-1:])  # per-patch mean 0, var 1
        return F.mse_loss(pred.float(), target.float())
