"""Online evaluation of a representation while it trains, on detached features.

Both classifiers read a bank of recent training features (the whole train split when it
fits) and are the frozen-feature protocol's own (evaluation/), so the numbers they log at
the end of a run follow ``eval.py mode=features`` on the same checkpoint (docs/evaluation.md
measures how closely):
- a linear probe fitted on the bank at the start of every evaluation, exactly as the
  protocol fits one grid point (evaluation/linear_grid.py; about 2 s for 4,096 x 768 on
  2 CPU cores): fitted afresh, it reads the features as they are now, where a probe trained
  alongside by the run's optimizer would lag them as they move;
- DINO's kNN on features standardised with the bank's statistics (the protocol's ``+bn``
  view: without it a large offset shared by all pooled features blurs cosine similarity).

And two collapse signals: the per-dimension std of normalised features and RankMe, the
effective rank of the feature matrix (Garrido et al. 2023), logged as the paper defines it
(``rankme``) and after centring (``rankme_centred``). Any module that produces one feature
vector per image can own one of these; it holds no Lightning code.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

from trainlab.evaluation.knn import knn_scores
from trainlab.evaluation.linear_grid import train_heads


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
        num_classes: int | None,
        knn_k: int = 20,
        knn_temperature: float = 0.07,
        bank_size: int = 4096,
        probe_weight_decay: float = 1e-5,
        probe_iterations: int = 300,
        max_rank_samples: int = 4096,
    ):
        super().__init__()
        self.num_classes, self.knn_k, self.knn_temperature = num_classes, knn_k, knn_temperature
        self.probe_weight_decay, self.probe_iterations = probe_weight_decay, probe_iterations
        self.max_rank_samples = max_rank_samples
        self.register_buffer("bank", torch.zeros(bank_size, dim))
        self.register_buffer("bank_labels", torch.full((bank_size,), -1, dtype=torch.long))
        self.register_buffer("bank_next", torch.zeros((), dtype=torch.long))
        # No classes (data without labels): the bank's labels stay -1, nothing is fitted and
        # no accuracy is kept.
        self.probe_acc = MulticlassAccuracy(num_classes) if num_classes else None
        self.knn_acc = MulticlassAccuracy(num_classes) if num_classes else None
        # Fitted by fit() from the bank; plain tensors, not state: a checkpoint's bank refits them.
        self._probe: tuple[torch.Tensor, torch.Tensor] | None = None
        self._standardise: tuple[torch.Tensor, torch.Tensor] | None = None
        self._seen: list[torch.Tensor] = []

    @torch.no_grad()
    def enqueue(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        """Store training features. Under DDP pass every rank's features (gathered): DDP
        broadcasts buffers from rank 0, so a rank-local bank would not survive."""
        features = features.float()
        n, size = len(features), len(self.bank)
        idx = (self.bank_next + torch.arange(n, device=features.device)) % size
        self.bank[idx], self.bank_labels[idx] = features[-size:], labels[-size:]
        self.bank_next.copy_((self.bank_next + n) % size)

    def fit(self) -> None:
        """Fit the probe and the kNN's standardisation to the bank as it is now (the start of
        an evaluation). Every rank holds the same bank, so every rank fits the same probe."""
        valid = self.bank_labels >= 0
        if not valid.any():  # before the first training step (Lightning's sanity check)
            self._probe = self._standardise = None
            return
        x, y = self.bank[valid], self.bank_labels[valid]
        self._standardise = (x.mean(dim=0), x.std(dim=0) + 1e-6)
        # Lightning evaluates under inference mode, where nothing can be differentiated, and
        # a bank restored there is an inference tensor: leave the mode and copy it out.
        with (
            torch.inference_mode(False),
            torch.enable_grad(),
            torch.autocast(x.device.type, enabled=False),
        ):
            heads = train_heads(
                x.clone(), y.clone(), self.num_classes, (self.probe_weight_decay,),
                self.probe_iterations,
            )  # fmt: skip
        self._probe = (heads.weight[0].detach(), heads.bias[0].detach())

    @torch.no_grad()
    def update(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        """Score a batch of held-out features against the probe and the kNN bank."""
        features = features.float()
        if self._probe is not None:
            weight, bias = self._probe
            self.probe_acc.update(features @ weight.T + bias, labels)
            mean, std = self._standardise
            valid = self.bank_labels >= 0
            scores = knn_scores(
                (features - mean) / std,
                (self.bank[valid] - mean) / std,
                self.bank_labels[valid],
                self.num_classes,
                self.knn_k,
                self.knn_temperature,
            )
            self.knn_acc.update(scores, labels)
        if sum(len(f) for f in self._seen) < self.max_rank_samples:
            self._seen.append(features)

    def collapse_stats(self, gathered: torch.Tensor) -> dict[str, torch.Tensor]:
        """RankMe of the seen features, and their spread where there is one: one image
        (a small folder's validation split) has no std."""
        stats = {"rankme": rankme(gathered), "rankme_centred": rankme(gathered, centred=True)}
        if len(gathered) > 1:
            stats["feat_std"] = feature_std(gathered)
        return stats

    def take_seen(self) -> torch.Tensor | None:
        seen, self._seen = self._seen, []
        return torch.cat(seen) if seen else None
