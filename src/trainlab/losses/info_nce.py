"""The contrastive loss of SimCLR (Chen et al. 2020, NT-Xent, their Eq. 1): of the 2N
embeddings of a batch's two views, each has its other view as the positive and the other
2N - 2 as negatives, scored by cosine similarity over a temperature:

    l(i, j) = -log( exp(sim(z_i, z_j) / t) / sum over k != i of exp(sim(z_i, z_k) / t) )

averaged over all 2N anchors. The negatives are the whole batch given: under DDP pass
embeddings gathered with networks/gather.py:gather_batch, and every rank computes the loss
of the global batch, as one process would (gather.py says why the gradients then agree).
Pair it with networks/projector.py, the projection that narrows to its own width."""

import torch
import torch.nn.functional as F
from torch import nn

from trainlab.utils.ranges import Positive


class InfoNCELoss(nn.Module):
    """NT-Xent over two views' embeddings (N, D) each, computed in at least float32."""

    def __init__(self, temperature: Positive = 0.1):
        super().__init__()
        self.temperature = temperature

    def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(z1.dtype, torch.float32)
        z = F.normalize(torch.cat([z1, z2]).to(dtype), dim=1)
        n = z1.shape[0]
        logits = z @ z.T / self.temperature
        itself = torch.eye(2 * n, dtype=torch.bool, device=z.device)
        logits = logits.masked_fill(itself, float("-inf"))  # an anchor is not its own negative
        positive = torch.arange(2 * n, device=z.device).roll(n)  # i's other view: i + n mod 2n
        return F.cross_entropy(logits, positive)
