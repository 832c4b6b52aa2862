"""A picture of I-JEPA's masks: validation images with the context and target blocks drawn over.
A part (docs/parts/mask_picture.md), reached by configs/callbacks/pictures/masks.yaml only."""

import torch
from lightning.pytorch.callbacks import Callback
from torchvision.utils import make_grid

from trainlab.callbacks.pictures import enlarge, publish
from trainlab.utils.ranges import Count
from trainlab.utils.seeding import run_seed, step_generator

# Context in translucent blue; each target block in its own colour.
CONTEXT_RGB = torch.tensor([0.1, 0.4, 1.0])
TARGET_RGB = torch.tensor([[1.0, 0.2, 0.2], [0.2, 0.9, 0.2], [1.0, 0.8, 0.1], [0.9, 0.3, 0.9]])


def overlay(
    images: torch.Tensor,
    context: torch.Tensor,
    targets: torch.Tensor,
    grid,
    patch: int,
    alpha: float = 0.45,
) -> torch.Tensor:
    """images (B, C, H, W) in [0, 1]; context (B, K) and targets (B, M, T) token indices."""
    B, (gh, gw) = len(images), grid
    rgb = images.expand(B, 3, *images.shape[2:]).clone() if images.shape[1] == 1 else images.clone()
    colour = torch.zeros(B, gh * gw, 3)
    hit = torch.zeros(B, gh * gw, 1)
    colour.scatter_(
        1, context[..., None].expand(-1, -1, 3), CONTEXT_RGB.expand(B, context.shape[1], 3)
    )
    hit.scatter_(1, context[..., None], 1.0)
    for m in range(targets.shape[1]):
        idx = targets[:, m]
        colour.scatter_(
            1,
            idx[..., None].expand(-1, -1, 3),
            TARGET_RGB[m % len(TARGET_RGB)].expand(B, idx.shape[1], 3),
        )
        hit.scatter_(1, idx[..., None], 1.0)

    def to_pixels(t: torch.Tensor) -> torch.Tensor:  # (B, tokens, C) -> (B, C, H, W)
        t = t.reshape(B, gh, gw, -1).permute(0, 3, 1, 2)
        return t.repeat_interleave(patch, 2).repeat_interleave(patch, 3)

    colour, hit = to_pixels(colour), to_pixels(hit) * alpha
    return rgb * (1 - hit) + colour * hit


class MaskOverlay(Callback):
    """Each validation epoch: draw the masks of a fixed step over the first validation
    images, log the picture to TensorBoard / W&B, and keep the latest as a PNG in the run dir."""

    def __init__(self, num_images: Count = 16, dirname: str = "pictures"):
        self.num_images, self.dirname = num_images, dirname

    def on_validation_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking or not trainer.is_global_zero or not hasattr(pl_module, "masks"):
            return
        dm = trainer.datamodule
        images = torch.stack(
            [dm.val_set[i][0] for i in range(min(self.num_images, len(dm.val_set)))]
        )
        mean = torch.tensor(dm.mean).view(1, -1, 1, 1)
        std = torch.tensor(dm.std).view(1, -1, 1, 1)
        images = (images * std + mean).clamp(0, 1)
        masks = pl_module.masks(len(images), step_generator(run_seed(), trainer.current_epoch, 0))
        encoder = pl_module.encoder
        picture = overlay(
            images, masks.context, masks.targets, encoder.grid, encoder.patch_embed.patch_size[0]
        )
        grid = make_grid(enlarge(picture), nrow=8, padding=2)
        publish(trainer, "val/masks", grid, "masks.png", self.dirname)
