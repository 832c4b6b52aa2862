"""Online evaluation of a representation while it trains, on detached features.

A linear probe (trained by the run's optimizer on detached features, so no gradient
reaches the encoder), a kNN classifier over a bank of recent training features, and two
collapse signals: the per-dimension std of normalised features and RankMe, the effective
rank of the feature matrix (Garrido et al. 2023), logged as the paper defines it (``rankme``)
and after centring (``rankme_centred``). Any module that produces one feature
vector per image can own one of these; it holds no Lightning code.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

from trainlab.evaluation.knn import knn_scores


def rankme(features: torch.Tensor, centred: bool = False, eps: float = 1e-7) -> torch.Tensor:
    """exp(entropy of the normalised singular values): 1 when collapsed, up to min(N, D).

    The paper's RankMe (and stable-pretraining's) uses the embeddings as they are. With
    ``centred=True`` the mean is removed first: average-pooled ViT features share a large
    constant offset that takes one singular value of its own in the uncentred version.
    """
    features = features.float()
    if centred:
        features = features - features.mean(dim=0)
    s = torch.linalg.svdvals(features)
    p = s / (s.sum() + eps) + eps
    return torch.exp(-(p * p.log()).sum())


def feature_std(features: torch.Tensor) -> torch.Tensor:
    """Mean over dimensions of the std of centred, L2-normalised features, times sqrt(D):
    about 1 for well-spread features, 0 for a collapsed encoder."""
    features = features.float()
    z = F.normalize(features - features.mean(dim=0), dim=1)
    return z.std(dim=0).mean() * z.shape[1] ** 0.5


class OnlineEvaluator(nn.Module):
    def __init__(
        self,
        dim: int,
        num_classes: int,
        knn_k: int = 20,
        knn_temperature: float = 0.07,
        bank_size: int = 4096,
        max_rank_samples: int = 4096,
    ):
        super().__init__()
        # BatchNorm without affine standardises the features, as in MAE's linear probe.
        self.probe = nn.Sequential(nn.BatchNorm1d(dim, affine=False), nn.Linear(dim, num_classes))
        self.num_classes, self.knn_k, self.knn_temperature = num_classes, knn_k, knn_temperature
        self.max_rank_samples = max_rank_samples
        self.register_buffer("bank", torch.zeros(bank_size, dim))
        self.register_buffer("bank_labels", torch.full((bank_size,), -1, dtype=torch.long))
        self.register_buffer("bank_next", torch.zeros((), dtype=torch.long))
        self.probe_acc = MulticlassAccuracy(num_classes)
        self.knn_acc = MulticlassAccuracy(num_classes)
        self._seen: list[torch.Tensor] = []

    def training_loss(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The probe's cross-entropy on detached features."""
        return F.cross_entropy(self.probe(features.detach().float()), labels)

    @torch.no_grad()
    def enqueue(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        """Store training features for kNN. Under DDP pass every rank's features (gathered):
        DDP broadcasts buffers from rank 0, so a rank-local bank would not survive."""
        features = features.float()
        n, size = len(features), len(self.bank)
        idx = (self.bank_next + torch.arange(n, device=features.device)) % size
        self.bank[idx], self.bank_labels[idx] = features[-size:], labels[-size:]
        self.bank_next.copy_((self.bank_next + n) % size)

    @torch.no_grad()
    def knn_predict(self, features: torch.Tensor) -> torch.Tensor:
        """DINO's kNN class scores against the filled part of the bank."""
        valid = self.bank_labels >= 0
        return knn_scores(
            features,
            self.bank[valid],
            self.bank_labels[valid],
            self.num_classes,
            self.knn_k,
            self.knn_temperature,
        )

    @torch.no_grad()
    def update(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        """Score a batch of held-out features against the probe and the kNN bank."""
        self.probe_acc.update(self.probe(features.float()), labels)
        if (self.bank_labels >= 0).any():
            self.knn_acc.update(self.knn_predict(features), labels)
        if sum(len(f) for f in self._seen) < self.max_rank_samples:
            self._seen.append(features.detach().float())

    def collapse_stats(self, gathered: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "feat_std": feature_std(gathered),
            "rankme": rankme(gathered),
            "rankme_centred": rankme(gathered, centred=True),
        }

    def take_seen(self) -> torch.Tensor | None:
        seen, self._seen = self._seen, []
        return torch.cat(seen) if seen else None
