"""I-JEPA's loss (Assran et al. 2023): the distance between the predicted and the target
encoder's features of the target tokens. The paper writes L2; the official code uses
smooth-L1 (beta 1), the default here."""

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

DISTANCES = {"smooth_l1": F.smooth_l1_loss, "l1": F.l1_loss, "l2": F.mse_loss}


class FeatureRegressionLoss(nn.Module):
    def __init__(self, distance: Literal["smooth_l1", "l1", "l2"] = "smooth_l1"):
        super().__init__()
        self.distance = DISTANCES[distance]

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # At least float32 even under bf16 autocast: the loss is a small difference of features.
        dtype = torch.promote_types(pred.dtype, torch.float32)
        return self.distance(pred.to(dtype), target.to(dtype))
