"""torchvision.transforms.v2 pipelines shared by every image DataModule."""

from collections.abc import Sequence

import torch
from pydantic import ConfigDict, with_config
from torchvision.transforms import v2
from typing_extensions import TypedDict  # pydantic reads TypedDicts of this module only

from trainlab.utils.ranges import Count, PositiveFraction, Probability

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


@with_config(ConfigDict(extra="forbid"))
class View(TypedDict, total=False):
    """One view's recipe, as data.views lists them (build_view): every key optional, and its
    ranges checked with the config, before any image is drawn."""

    size: Count
    crop_scale: tuple[PositiveFraction, PositiveFraction]
    hflip: Probability
    color_jitter: Probability
    grayscale: Probability
    blur: Probability
    solarize: Probability


def build_view(
    recipe: dict,
    image_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    in_chans: int,
    normalise: bool = True,
) -> v2.Compose:
    """One view of a joint-embedding recipe (SimCLR / VICReg / DINO style), from a dict:
    ``size`` (default data.image_size), ``crop_scale`` ([0.08, 1.0]), ``hflip`` (0.5) and the
    probabilities ``color_jitter`` (0.8: brightness 0.4, contrast 0.4, saturation 0.2, hue
    0.1), ``grayscale`` (0.2), ``blur`` (0.0) and ``solarize`` (0.0); colour steps apply to
    3-channel images only. torchvision's v2 transforms, as for the single image."""
    known = {"size", "crop_scale", "hflip", "color_jitter", "grayscale", "blur", "solarize"}
    if unknown := set(recipe) - known:
        raise ValueError(f"unknown key(s) {sorted(unknown)} in a view: use {sorted(known)}")
    size = recipe.get("size", image_size)
    steps: list = [
        v2.ToImage(),
        v2.RandomResizedCrop(
            size, scale=tuple(recipe.get("crop_scale", (0.08, 1.0))), antialias=True
        ),
        v2.RandomHorizontalFlip(recipe.get("hflip", 0.5)),
    ]
    if in_chans == 3:
        jitter = v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)
        steps += [
            v2.RandomApply([jitter], p=recipe.get("color_jitter", 0.8)),
            v2.RandomGrayscale(recipe.get("grayscale", 0.2)),
        ]
    if recipe.get("blur", 0.0):
        kernel = 2 * (size // 20) + 1  # about a tenth of the view, odd
        steps.append(v2.RandomApply([v2.GaussianBlur(kernel, sigma=(0.1, 2.0))], p=recipe["blur"]))
    steps += [v2.ToDtype(torch.uint8, scale=True)]
    if recipe.get("solarize", 0.0):
        steps.append(v2.RandomSolarize(threshold=128, p=recipe["solarize"]))
    if normalise:
        steps += normalisation(mean, std).transforms
    return v2.Compose(steps)


class MultiView:
    """An image as a list of views, one per transform (in the loader workers)."""

    def __init__(self, transforms: list):
        self.transforms = transforms

    def __call__(self, image) -> list[torch.Tensor]:
        return [t(image) for t in self.transforms]


def normalisation(mean: Sequence[float], std: Sequence[float]) -> v2.Compose:
    """uint8 images, one or a batch, to the model's float input: the same operations on a
    batch as on each image, so the result is the same to the bit."""
    return v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std))])


class DeviceNormalisation:
    """uint8 batches to the model's float input on their own device (the batch transform
    after the copy): ``normalisation``'s arithmetic, to the bit, with mean and std copied to
    each device once. torchvision's Normalize builds both tensors anew from host memory on
    every call: two blocking host-to-device copies, a host sync each on a GPU."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        self.mean, self.std = list(mean), list(std)
        self.stats: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if images.device not in self.stats:
            self.stats[images.device] = tuple(
                torch.tensor(v, dtype=torch.float32, device=images.device).view(-1, 1, 1)
                for v in (self.mean, self.std)
            )
        mean, std = self.stats[images.device]
        return images.to(torch.float32).mul_(1.0 / 255).sub_(mean).div_(std)
