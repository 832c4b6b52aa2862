"""A grid of linear probes on cached features, chosen on validation.

Every (view, weight decay) point is a multinomial logistic regression, mean cross-entropy +
wd/2 |W|^2 (the bias free), fitted by full-batch L-BFGS (the solver of CLIP's linear probes)
in whitened coordinates, for at most 1,000 iterations. Each point is fitted on its own: fitted
as one summed problem, L-BFGS's shared line search and curvature history made each head's
answer depend on the others (on seed 0's ``ijepa_mnist`` features the weight decay 1e-6
head read 0.908 on val with three others and 0.836 alone).

The whitening spans only the directions in which the features vary, so features of zero
variance carry no weight. The fits then reach the optimum: on standardised digits (3 of the
64 features constant) every weight decay of the grid ends within 1e-4 of scikit-learn's
``LogisticRegression`` optimum of the same objective (tests/test_evaluation.py). The
weight-decay grid reaches 1e-1 because the raw pixels choose 1e-2. Written here because
scikit-learn fits one model per call on the CPU (40 s for one weight decay on these
features).
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from rich.progress import Progress

from trainlab.utils.console import bars_shown
from trainlab.utils.logging import get_logger

log = get_logger(__name__)

WEIGHT_DECAYS = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1)


@dataclass(frozen=True)
class HeadResult:
    view: str
    weight_decay: float
    val_acc: float
    test_acc: float
    iterations: int = 0  # L-BFGS's, of at most max_iter
    gradient: float = 0.0  # the objective's largest gradient entry where the fit stopped
    converged: bool = True  # False: cut off by max_iter (or its 1.25 x evaluations)


def accuracy(scores: torch.Tensor, labels: torch.Tensor) -> float:
    return float((scores.argmax(dim=1) == labels).float().mean())


class LinearHeads(torch.nn.Module):
    """H linear heads over the same input, stored as one (H, C, D) tensor: one GEMM for all."""

    def __init__(self, num_heads: int, dim: int, num_classes: int):
        super().__init__()
        # zero init: the convex problem's answer does not depend on a seed
        self.weight = torch.nn.Parameter(torch.zeros(num_heads, num_classes, dim))
        self.bias = torch.nn.Parameter(torch.zeros(num_heads, num_classes))
        # each fit's (iterations, gradient, converged), in the order of the heads
        self.stops: list[tuple[int, float, bool]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, D) -> logits (H, N, C)."""
        H, C, D = self.weight.shape
        logits = x @ self.weight.reshape(H * C, D).T + self.bias.reshape(H * C)
        return logits.reshape(len(x), H, C).transpose(0, 1)


def whitening(x: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, P) such that (x - mean) @ P has identity covariance: P (D, K) spans the K
    directions in which x varies (eigenvalues above ``eps`` times the largest). The others
    (a feature of zero variance) carry no signal, and the penalised optimum has no weight
    there: whitening them blew them up and stalled L-BFGS above the optimum.

    With fewer images N than dimensions D (the pixels of photos: D = 150,528 at 224 px RGB)
    the directions come from the N x N Gram matrix instead of the D x D covariance, whose
    float64 alone would take 181 GB there: the same P (P P^T is the covariance's
    pseudo-inverse either way), in time and memory linear in D."""
    mean = x.mean(dim=0)
    centred = (x - mean).double()
    n, d = centred.shape
    if n >= d:
        eigval, eigvec = torch.linalg.eigh(torch.cov(centred.T))
        kept = eigval > eps * eigval.max().clamp(min=1e-30)
        return mean, (eigvec[:, kept] * eigval[kept].rsqrt()).float()
    # X X^T u = s u gives the covariance's eigenvector X^T u / sqrt(s), eigenvalue s / (n-1)
    eigval, eigvec = torch.linalg.eigh(centred @ centred.T)
    kept = eigval > eps * eigval.max().clamp(min=1e-30)
    scale = (n - 1) ** 0.5 / eigval[kept]  # 1/sqrt(s) for the unit vector, sqrt((n-1)/s)
    return mean, ((centred.T @ eigvec[:, kept]) * scale).float()


def train_heads(
    x: torch.Tensor,
    y: torch.Tensor,
    num_classes: int,
    weight_decays=WEIGHT_DECAYS,
    max_iter: int = 1000,
    fitted: Callable[[], None] = lambda: None,
) -> LinearHeads:
    """One head per weight decay wd, each minimising mean cross-entropy + wd/2 * |W|^2 alone.

    L-BFGS runs in whitened coordinates, W = V (P S)^T with x's whitening P and a scale S per
    weight decay: an exact change of variables (the objective and its minimum are those of
    W). Whitening conditions the data term (without it the chosen head on a random ViT's
    features was 6 points lower after 300 iterations, 0.80 against 0.85); the penalty's
    curvature there is wd / var_k along direction k, which dwarfs the data term's where the
    features barely vary. S scales direction k by (1 + wd / var_k)^-1/2, so that both terms
    together weigh about 1 in every direction. On the default job's rating, 42 of its 50 fits
    were cut off at 300 iterations without S; with it 49 converge, in 9 to 966 iterations,
    and the one left is the standardised pixels' at 1e-5, never chosen there.

    |W|^2 is read as sum_k |V_k|^2 |P_k S_k|^2: P's columns are orthogonal, so this is the
    same penalty in O(K) an evaluation instead of O(K D), which at 150,528 dimensions (fewer
    images than dimensions) was nearly all of a fit's time. The optimum lies in the span of
    the images, which P spans: the fit loses nothing there.
    """
    mean, P = whitening(x)
    xw = (x - mean) @ P
    columns = P.pow(2).sum(dim=0)  # |P_k|^2 = 1 / var_k
    heads = LinearHeads(len(weight_decays), x.shape[1], num_classes)
    for h, wd in enumerate(weight_decays):
        scale = (1 + wd * columns).rsqrt()  # S: it scales V, so the data is not copied
        norms = columns * scale.pow(2)
        head = LinearHeads(1, P.shape[1], num_classes)  # V and b in these coordinates
        optimizer = torch.optim.LBFGS(
            head.parameters(),
            max_iter=max_iter,
            history_size=20,
            line_search_fn="strong_wolfe",
            tolerance_grad=1e-7,
            tolerance_change=1e-10,
        )

        def closure(head=head, optimizer=optimizer, wd=wd, scale=scale, norms=norms):
            optimizer.zero_grad()
            loss = F.cross_entropy(F.linear(xw, head.weight[0] * scale, head.bias[0]), y)
            loss = loss + 0.5 * wd * (head.weight[0].pow(2) * norms).sum()
            loss.backward()
            return loss

        optimizer.step(closure)
        closure()  # the gradient where it stopped: converged, or cut off at max_iter
        gradient = max(float(p.grad.abs().max()) for p in head.parameters())
        state, limits = optimizer.state[head.weight], optimizer.defaults
        cut = state["n_iter"] >= max_iter or state["func_evals"] >= limits["max_eval"]
        heads.stops.append((state["n_iter"], gradient, not cut))
        with torch.no_grad():  # back to the features' coordinates: logits = x W^T + b
            heads.weight[h] = head.weight[0] @ (P * scale).T
            heads.bias[h] = head.bias[0] - heads.weight[h] @ mean
        fitted()
    return heads


@torch.no_grad()
def linear_grid(
    views: dict[str, dict[str, torch.Tensor]],
    labels: dict[str, torch.Tensor],
    num_classes: int,
    weight_decays=WEIGHT_DECAYS,
    max_iter: int = 1000,
    desc: str | None = None,
) -> tuple[HeadResult, list[HeadResult]]:
    """Fit every head on ``train``, pick the one with the best ``val`` accuracy, report ``test``.

    ``views`` maps a view name to its features per split ({"train", "val", "test"}); the
    choice reads train and val only (ties go to the first point in grid order). ``desc``:
    a progress bar with the time left over the grid's fits (None: no bar).
    """
    results = []
    shown = desc is not None and bars_shown()
    with Progress(*Progress.get_default_columns(), transient=True, disable=not shown) as bar:
        task = bar.add_task(f"{desc}: linear probes", total=len(views) * len(weight_decays))
        for view, feats in views.items():
            with torch.enable_grad():
                heads = train_heads(
                    feats["train"],
                    labels["train"],
                    num_classes,
                    weight_decays,
                    max_iter,
                    fitted=lambda: bar.advance(task),
                )
            val, test = heads(feats["val"]), heads(feats["test"])
            for h, wd in enumerate(weight_decays):
                val_acc = accuracy(val[h], labels["val"])
                test_acc = accuracy(test[h], labels["test"])
                results.append(HeadResult(view, wd, val_acc, test_acc, *heads.stops[h]))
    best = max(results, key=lambda r: r.val_acc)
    if not best.converged:
        log.warning(
            f"{desc or 'features'}: the chosen linear probe ({best.view}, weight decay "
            f"{best.weight_decay:g}) was cut off after {best.iterations} L-BFGS iterations, "
            f"not converged (largest gradient {best.gradient:.1e}): its accuracy may be below "
            "the optimum's"
        )
    return best, results
