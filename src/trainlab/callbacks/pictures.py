"""Publish a picture: a PNG in the run dir, and an image in TensorBoard / W&B when active."""

from pathlib import Path

import torch
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from torchvision.utils import save_image


def enlarge(images: torch.Tensor, min_size: int = 96) -> torch.Tensor:
    """Repeat pixels so small images (8-32 px digits) can be seen."""
    scale = max(1, min_size // images.shape[-1])
    return images.repeat_interleave(scale, -2).repeat_interleave(scale, -1)


def publish(trainer, tag: str, grid: torch.Tensor, filename: str, dirname: str = "pictures"):
    """Save ``grid`` (C, H, W in [0, 1]) as <run dir>/<dirname>/<filename> and log it as ``tag``."""
    path = Path(trainer.default_root_dir) / dirname / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    save_image(grid, path)
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_image(tag, grid, trainer.global_step)
        elif isinstance(logger, WandbLogger):
            logger.log_image(tag, [grid], step=trainer.global_step)
    return path
