"""MAE's loss (He et al. 2022): the mean squared error on the pixels of the masked patches,
each target patch standardised first when ``norm_pix`` (the paper's default) as the official
models_mae.py does: by its mean and its unbiased variance + 1e-6 (not layer norm's biased
variance + 1e-5, which reads a patch of 16 pixels 3 % larger)."""

import torch
import torch.nn.functional as F
from torch import nn


class MaskedPixelLoss(nn.Module):
    def __init__(self, norm_pix: bool = True):
        super().__init__()
        self.norm_pix = norm_pix

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``pred`` and ``target``: (B, masked patches, patch pixels)."""
        target = target.float()
        if self.norm_pix:
            mean, var = target.mean(dim=-1, keepdim=True), target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1e-6).sqrt()
        return F.mse_loss(pred.float(), target)
