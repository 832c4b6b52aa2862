"""Rate the frozen encoder of a checkpoint (trainlab, official I-JEPA or timm) against the
raw pixels and a random encoder of the same shape, on one data module's splits."""

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from trainlab.evaluation.features import encoder_views, pixel_views
from trainlab.evaluation.protocol import Rating, rate
from trainlab.model.networks.weights import ijepa_parts, load_into, read_state
from trainlab.run.console import print_jobs
from trainlab.utils.errors import UserError
from trainlab.utils.logging import get_logger

log = get_logger(__name__)


def load_encoder(encoder_cfg: DictConfig, ckpt: str, part: str) -> torch.nn.Module:
    """The encoder of ``encoder_cfg``'s shape with ``part`` of the weights file ``ckpt``."""
    parts = ijepa_parts(read_state(ckpt))
    if part not in parts:
        if "encoder" not in parts:
            raise UserError(f"{ckpt} holds no encoder weights (it has {', '.join(parts)})")
        log.warning(f"{ckpt} holds no {part}: rating its encoder instead")
        part = "encoder"
    encoder = instantiate(encoder_cfg)
    load_into(encoder, parts[part], part)
    return encoder.eval()


def rate_checkpoint(
    encoder_cfg: DictConfig,
    ckpt: str,
    datamodule,
    init_part: str = "target_encoder",
    baselines: bool = True,
    seed: int = 0,
) -> dict[str, Rating]:
    """{"features": ..., and with baselines "pixels", "random"}, all on the same splits."""
    datasets = datamodule.eval_splits()
    classes = datamodule.num_classes
    ratings = {}
    if baselines:
        ratings["pixels"] = rate(pixel_views, datasets, classes, "pixels")
        torch.manual_seed(seed)  # the random encoder is a function of the seed
        ratings["random"] = rate(
            encoder_views(instantiate(encoder_cfg).eval()), datasets, classes, "random"
        )
    encoder = load_encoder(encoder_cfg, ckpt, init_part)
    ratings["features"] = rate(encoder_views(encoder), datasets, classes, init_part)
    return ratings


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
