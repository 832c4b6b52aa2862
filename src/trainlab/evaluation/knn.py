"""DINO's weighted kNN classifier (Caron et al. 2021): k=20, cosine, votes exp(sim / 0.07)."""

import torch
import torch.nn.functional as F


@torch.no_grad()
def knn_scores(
    query: torch.Tensor,
    bank: torch.Tensor,
    bank_labels: torch.Tensor,
    num_classes: int,
    k: int = 20,
    temperature: float = 0.07,
    chunk: int = 1024,
) -> torch.Tensor:
    """Class scores (N, C): each query's k most cosine-similar bank rows vote exp(sim / T)."""
    bank = F.normalize(bank.float(), dim=1)
    scores = []
    for q in query.split(chunk):  # bounded memory for large banks
        # float32 even under bf16 autocast: low precision would blur the ranking
        with torch.autocast(q.device.type, enabled=False):
            sim = F.normalize(q.float(), dim=1) @ bank.T
        top_sim, top_idx = sim.topk(min(k, len(bank)), dim=1)
        votes = torch.zeros(len(q), num_classes, device=q.device)
        scores.append(votes.scatter_add_(1, bank_labels[top_idx], (top_sim / temperature).exp()))
    return torch.cat(scores)
