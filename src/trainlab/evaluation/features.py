"""Frozen features of every image of a split, computed once with the evaluation transform."""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from rich.progress import track
from torch.utils.data import DataLoader, Dataset, Subset

from trainlab.data.worker_signals import init_worker
from trainlab.networks.encoder import pooled_layers, probe_layers
from trainlab.utils.console import bars_shown

Views = Callable[[torch.Tensor], dict[str, torch.Tensor]]


# The pixel baseline's largest side: CIFAR's. Larger images are average-pooled to it, so the
# baseline is defined at any image size (224 px RGB would be 150,528 features a linear probe
# cannot condition) and the embedded sets (28 and 32 px) keep every pixel.
PIXEL_SIDE = 32


def pixel_views(images: torch.Tensor) -> dict[str, torch.Tensor]:
    """The raw-pixel baseline: the normalised image, flattened, at most PIXEL_SIDE a side."""
    height, width = images.shape[-2:]
    if max(height, width) > PIXEL_SIDE:
        size = (min(height, PIXEL_SIDE), min(width, PIXEL_SIDE))
        images = torch.nn.functional.adaptive_avg_pool2d(images.float(), size)
    return {"pixels": images.flatten(1)}


def encoder_views(encoder: torch.nn.Module) -> Views:
    """Average-pooled outputs of the last stage or block and of the last 4 concatenated,
    the last after the encoder's final norm (the I-JEPA paper's probe features), of any
    encoder of timm's contract (networks/encoder.py)."""
    n = probe_layers(encoder)

    def views(images: torch.Tensor) -> dict[str, torch.Tensor]:
        pooled = pooled_layers(encoder, images, n)
        return {"last": pooled[-1], f"last{n}": torch.cat(pooled, dim=1)}

    return views


@dataclass(frozen=True)
class Extraction:
    """Where and how features are computed: ``device`` (bf16 autocast on CUDA), the loader's
    ``batch_size`` (a run's data.eval_batch_size) and ``num_workers``, and, for a multi-rank
    run, this process's ``rank`` of ``world_size`` with ``all_gather`` (Lightning's
    ``strategy.all_gather``): each rank computes every world_size-th image and all end with
    every feature."""

    device: torch.device = torch.device("cpu")
    batch_size: int = 256
    num_workers: int = 0
    rank: int = 0
    world_size: int = 1
    all_gather: Callable[[torch.Tensor], torch.Tensor] | None = None


LOCAL = Extraction()  # one process, on the CPU


def gather_shards(x: torch.Tensor, total: int, how: Extraction) -> torch.Tensor:
    """This rank's rows ``rank::world_size`` of a (total, ...) tensor -> all rows, in order.
    Shards differ by at most one row: padded to the longest for all_gather."""
    longest = -(-total // how.world_size)
    padded = torch.cat([x, x.new_zeros(longest - len(x), *x.shape[1:])])
    gathered = how.all_gather(padded)  # (world_size, longest, ...)
    out = x.new_empty(total, *x.shape[1:])
    for rank in range(how.world_size):
        rows = len(range(rank, total, how.world_size))
        out[rank :: how.world_size] = gathered[rank][:rows].to(out.device)
    return out


@torch.no_grad()
def extract(
    views: Views,
    dataset: Dataset,
    desc: str = "features",
    how: Extraction = LOCAL,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """({view: (N, D) float32}, labels (N,)) over a whole data set of (image, label), on
    ``how.device``, sharded over ranks where ``how.world_size`` > 1."""
    if how.world_size > 1:
        dataset = Subset(dataset, range(how.rank, len(dataset), how.world_size))
    out: dict[str, list[torch.Tensor]] = {}
    labels = []
    loader = DataLoader(
        dataset, batch_size=how.batch_size, num_workers=how.num_workers, worker_init_fn=init_worker
    )
    cuda = how.device.type == "cuda"
    shown = how.rank == 0 and bars_shown()
    for images, y in track(loader, description=desc, transient=True, disable=not shown):
        images = images.to(how.device, non_blocking=True)
        with torch.autocast(how.device.type, dtype=torch.bfloat16, enabled=cuda):
            for name, feats in views(images).items():
                out.setdefault(name, []).append(feats.float())
        labels.append(torch.as_tensor(y).to(how.device))
    if not labels:  # a split smaller than the ranks: this rank's shard is empty, 0 rows
        image, _ = (dataset.dataset if how.world_size > 1 else dataset)[0]
        out = {k: [v.float()[:0]] for k, v in views(image[None].to(how.device)).items()}
        labels = [torch.zeros(0, dtype=torch.long, device=how.device)]
    feats, labels = {k: torch.cat(v) for k, v in out.items()}, torch.cat(labels)
    if how.world_size > 1:
        total = len(dataset.dataset)
        feats = {k: gather_shards(v, total, how) for k, v in feats.items()}
        labels = gather_shards(labels, total, how)
    return feats, labels


def standardised(views: dict[str, dict[str, torch.Tensor]]) -> dict[str, dict[str, torch.Tensor]]:
    """Each view as it is and standardised with its train statistics (``<view>+bn``): what a
    BatchNorm without affine parameters in front of the head computes at evaluation."""
    out = dict(views)
    for name, splits in views.items():
        mean, std = splits["train"].mean(dim=0), splits["train"].std(dim=0) + 1e-6
        out[f"{name}+bn"] = {s: (x - mean) / std for s, x in splits.items()}
    return out
