"""Rate the frozen encoder of a checkpoint (trainlab, official I-JEPA or timm) against the
raw pixels and a random encoder of the same shape, on one data module's splits."""

from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch.utils.data import Dataset, Subset

from trainlab.data.low_shot import labels_of
from trainlab.evaluation.features import LOCAL, Extraction, encoder_views, pixel_views
from trainlab.evaluation.protocol import Rating, rate
from trainlab.networks.weights import load_into, network_parts, read_state
from trainlab.utils.console import print_jobs
from trainlab.utils.errors import UserError
from trainlab.utils.logging import get_logger

log = get_logger(__name__)


def evaluated_part(parts, part: str, ckpt: str, key: str = "features.init_part") -> str:
    """The network of ``parts`` to rate: ``part``, or for ``evaluated`` and ``target_encoder``
    of a file without them (MAE, VICReg, a classifier, timm weights) its encoder. A part that the file
    does not hold is refused, naming those it does: rating another silently would record
    the wrong network."""
    if part in parts:
        return part
    if part in ("evaluated", "target_encoder") and "encoder" in parts:
        log.info(f"{ckpt} holds no {part}: rating its encoder")
        return "encoder"
    held = ", ".join(parts) or "no network"
    raise UserError(f"{key}={part}: {ckpt} holds no {part} (it holds {held}): give one of those")


def load_encoder(encoder_cfg: DictConfig, ckpt: str, part: str) -> torch.nn.Module:
    """The encoder of ``encoder_cfg``'s shape with ``part`` of the weights file ``ckpt``."""
    parts = network_parts(read_state(ckpt))
    part = evaluated_part(parts, part, ckpt)
    encoder = instantiate(encoder_cfg)
    load_into(encoder, parts[part], part)
    return encoder.eval()


def at_most_per_class(dataset: Dataset, per_class: int | None, seed: int) -> Dataset:
    """At most ``per_class`` images of each class, the same ones for every encoder rated."""
    if per_class is None:
        return dataset
    labels = labels_of(dataset)
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(labels), generator=generator)
    kept, seen = [], {}
    for i in order.tolist():
        label = int(labels[i])
        if seen.get(label, 0) < per_class:
            seen[label] = seen.get(label, 0) + 1
            kept.append(i)
    return Subset(dataset, sorted(kept))


def bounded_splits(datamodule, train_per_class: int | None, eval_per_class: int | None, seed: int):
    """The data module's evaluation splits, each bounded per class (null: every image)."""
    return {
        split: at_most_per_class(d, train_per_class if split == "train" else eval_per_class, seed)
        for split, d in datamodule.eval_splits().items()
    }


def rate_checkpoint(
    encoder_cfg: DictConfig,
    ckpt: str,
    datamodule,
    init_part: str = "target_encoder",
    baselines: bool = True,
    seed: int = 0,
    how: Extraction = LOCAL,
    train_per_class: int | None = None,
    eval_per_class: int | None = None,
    knn_k: int = 20,
    datasets: dict[str, Dataset] | None = None,
) -> dict[str, Rating]:
    """{"features": ..., and with baselines "pixels", "random"}, all on the same splits.
    ``train_per_class`` / ``eval_per_class`` bound the probe's train split and the val and
    test splits (null: every image), for data sets where extracting all would take hours;
    ``knn_k``: kNN's neighbours."""
    if datasets is None:  # else the caller's bounded_splits, built once
        datasets = bounded_splits(datamodule, train_per_class, eval_per_class, seed)
    classes = datamodule.num_classes
    ratings = {}
    if baselines:
        ratings["pixels"] = rate(pixel_views, datasets, classes, "pixels", how, knn_k)
        torch.manual_seed(seed)  # the random encoder is a function of the seed
        random_encoder = instantiate(encoder_cfg).eval().to(how.device)
        ratings["random"] = rate(
            encoder_views(random_encoder), datasets, classes, "random", how, knn_k
        )
    encoder = load_encoder(encoder_cfg, ckpt, init_part).to(how.device)
    ratings["features"] = rate(encoder_views(encoder), datasets, classes, init_part, how, knn_k)
    return ratings


def ratings_title(ckpt: str, data: str, sizes: dict[str, int], ranks: int, seconds: float) -> str:
    """The table's title: what was rated, on how many images, by how many ranks, how long."""
    used = ", ".join(f"{split} {n:,}" for split, n in sizes.items())
    return (
        f"frozen features of {Path(ckpt).name} ({data}; images: {used}; "
        f"{ranks} rank(s), {seconds} s)"
    )


def print_ratings(ratings: dict[str, Rating], title: str) -> None:
    rows = [
        (
            name,
            r.linear.test_acc,
            r.knn_acc,
            f"{r.linear.view} wd={r.linear.weight_decay:g}",
            r.knn_view,
        )
        for name, r in ratings.items()
    ]
    print_jobs(
        title,
        ["features of", "linear (test)", "kNN (test)", "linear: chosen on val", "kNN: view"],
        rows,
    )
