"""torchvision.transforms.v2 pipelines shared by every image DataModule."""

from collections.abc import Sequence

import torch
from torchvision.transforms import v2

# Per-channel statistics for normalisation, by data set.
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def build_transform(
    image_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    train: bool,
    crop_scale: Sequence[float] | None = None,
    hflip: bool = False,
    normalise: bool = True,
) -> v2.Compose:
    """Train: optional random-resized crop and flip; eval: resize then centre crop.
    ``normalise=False`` stops at uint8 images; ``normalisation`` then does the rest.

    I-JEPA uses a random-resized crop (scale 0.3-1.0) and nothing else, so colour jitter
    and blur are left out on purpose; add them here if your method needs them.
    """
    steps: list = [v2.ToImage()]
    if train and crop_scale is not None:
        steps.append(v2.RandomResizedCrop(image_size, scale=tuple(crop_scale), antialias=True))
    else:
        steps += [v2.Resize(image_size, antialias=True), v2.CenterCrop(image_size)]
    if train and hflip:
        steps.append(v2.RandomHorizontalFlip())
    if not normalise:
        return v2.Compose([*steps, v2.ToDtype(torch.uint8, scale=True)])
    return v2.Compose([*steps, *normalisation(mean, std).transforms])


def normalisation(mean: Sequence[float], std: Sequence[float]) -> v2.Compose:
    """uint8 images, one or a batch, to the model's float input: the same operations on a
    batch as on each image, so the result is the same to the bit."""
    return v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std))])
