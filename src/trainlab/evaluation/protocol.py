"""The frozen-feature protocol: linear grid + kNN on an encoder and its baselines.

Every encoder is rated on the same splits with the same grid: the raw pixels (normalised,
flattened) and a randomly initialised encoder of the same shape are what an I-JEPA number
must beat to mean anything.
"""

from dataclasses import asdict, dataclass

import torch
from torch.utils.data import Dataset

from trainlab.evaluation.features import LOCAL, Extraction, Views, extract, standardised
from trainlab.evaluation.knn import knn_scores
from trainlab.evaluation.linear_grid import HeadResult, accuracy, linear_grid

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Rating:
    linear: HeadResult  # the grid point chosen on val, with its test accuracy
    knn_view: str  # the view kNN used, chosen on val
    knn_val_acc: float
    knn_acc: float  # test


def knn_choice(views, labels, num_classes: int, k: int = 20) -> tuple[str, float, float | None]:
    """(view, val acc, test acc) of DINO's kNN with the train split as bank, view chosen on
    val; test acc None where ``labels`` has no test split (a search that must not read it)."""
    best = None
    for name, feats in views.items():
        val, test = (
            accuracy(
                knn_scores(feats[s], feats["train"], labels["train"], num_classes, k), labels[s]
            )
            if s in labels
            else None
            for s in ("val", "test")
        )
        if best is None or val > best[1]:
            best = (name, val, test)
    return best


def extract_splits(
    views: Views,
    datasets: dict[str, Dataset],
    name: str = "features",
    how: Extraction = LOCAL,
    splits: tuple[str, ...] = SPLITS,
) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, torch.Tensor]]:
    """({view: {split: (N, D)}} with the ``+bn`` views added, {split: labels}): computed once."""
    feats: dict[str, dict[str, torch.Tensor]] = {}
    labels = {}
    for split in splits:
        by_view, labels[split] = extract(views, datasets[split], desc=f"{name} {split}", how=how)
        for view, x in by_view.items():
            feats.setdefault(view, {})[split] = x
    return standardised(feats), labels


def rate_features(feats, labels, num_classes: int, knn_k: int = 20, **grid) -> Rating:
    """The linear grid and kNN (``knn_k`` neighbours) on cached features, both chosen on val
    and scored on test; ``desc`` in ``grid`` names the grid's progress bar."""
    best, _ = linear_grid(feats, labels, num_classes, **grid)
    view, knn_val, knn_test = knn_choice(feats, labels, num_classes, knn_k)
    return Rating(best, view, knn_val, knn_test)


def rate(
    views: Views,
    datasets: dict[str, Dataset],
    num_classes: int,
    name: str = "features",
    how: Extraction = LOCAL,
    knn_k: int = 20,
    **grid,
) -> Rating:
    """Rate one feature extractor on ``datasets`` = {"train", "val", "test"} (eval transforms)."""
    feats, labels = extract_splits(views, datasets, name, how)
    desc = name if how.rank == 0 else None  # one bar, as extraction shows
    return rate_features(feats, labels, num_classes, knn_k, desc=desc, **grid)


def metrics(ratings: dict[str, Rating]) -> dict[str, float]:
    """metrics.json keys: ``features/*`` for the encoder, ``baseline/<name>_*`` for the others."""
    out = {}
    for name, r in ratings.items():
        prefix = "features/" if name == "features" else f"baseline/{name}_"
        out[prefix + "linear_acc"] = r.linear.test_acc
        out[prefix + "knn_acc"] = r.knn_acc
    return out


def choices(ratings: dict[str, Rating]) -> dict[str, dict]:
    """The chosen grid point and kNN view of each rating, for metrics.json."""
    return {
        name: {"linear": asdict(r.linear), "knn": {"view": r.knn_view, "val_acc": r.knn_val_acc}}
        for name, r in ratings.items()
    }
