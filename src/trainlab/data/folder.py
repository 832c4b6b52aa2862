"""Any folder of images, no labels: every image under ``data.root``, at any depth.

Photos sorted by date, by camera or not at all: the layout means nothing here, so no label
is read from it (a folder of class folders with labels is ``data=imagefolder``). Files
without an image extension and hidden files (a Mac's ``._photo.jpg``) are skipped and
counted; an image that cannot be decoded stops the run with its path. Validation and the
final test read ``data.val_fraction`` of the images, drawn by ``data.split_seed``: the
monitors that need no labels (RankMe, the features' spread, a masked method's loss).
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from torch.utils.data import Dataset
from torchvision.transforms.functional import pil_to_tensor

from trainlab.data.base import ImageDataModule
from trainlab.data.image_files import image_files
from trainlab.data.imagefolder import decode_samples, load_image
from trainlab.utils.errors import DataError
from trainlab.utils.logging import get_logger

log = get_logger(__name__)

#: The label of every image of a folder: none. The monitors' bank ignores it.
UNLABELLED = -1


class ImageFiles(Dataset):
    """(image, UNLABELLED) for each path, decoded in PIL ``mode`` ("RGB" or "L")."""

    def __init__(self, paths: list[Path], mode: str = "RGB"):
        self.paths, self.mode = paths, mode

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        return load_image(str(self.paths[index]), self.mode), UNLABELLED


def statistics(paths: list[Path], mode: str, count: int = 256) -> tuple[list, list]:
    """Each channel's mean and std over every pixel of ``count`` images drawn by seed 0 (the
    same on every rank), rounded to 3 decimals."""
    order = torch.randperm(len(paths), generator=torch.Generator().manual_seed(0))[:count]
    pixels, sums, squares = 0, 0, 0
    for index in order.tolist():
        image = pil_to_tensor(load_image(str(paths[index]), mode)).flatten(1).double() / 255
        pixels, sums, squares = (
            pixels + image.shape[1],
            sums + image.sum(1),
            squares + image.pow(2).sum(1),
        )
    mean = sums / pixels
    std = (squares / pixels - mean**2).clamp_min(1e-12).sqrt()
    return [round(v, 3) for v in mean.tolist()], [round(v, 3) for v in std.tolist()]


class FolderDataModule(ImageDataModule):
    """Every image under ``root``, unlabelled: ``val_fraction`` of them held out (seeded) for
    validation and the final test, the rest for training."""

    name = "folder"
    #: Read by the config (model/monitor.py): the run is judged by a monitor without labels.
    labels = "none"

    def __init__(
        self,
        num_classes: None = None,  # no labels: data=imagefolder has them
        mean: Sequence[float] | Literal["auto"] = "auto",
        std: Sequence[float] | Literal["auto"] = "auto",
        **kwargs,
    ):
        if "auto" in (mean, std):
            root, mode = Path(kwargs.get("root", "data")), kwargs.get("in_chans", 3)
            measured = statistics(image_files(root), "L" if mode == 1 else "RGB")
            mean = measured[0] if mean == "auto" else mean
            std = measured[1] if std == "auto" else std
            log.info(f"{root}: mean {list(mean)}, std {list(std)} (data.mean, data.std: auto)")
        super().__init__(num_classes=None, mean=mean, std=std, **kwargs)

    def check(self) -> None:
        if self.train_fraction < 1:
            raise DataError(
                f"data.train_fraction={self.train_fraction} draws a share of each class, and "
                "data=folder has no classes: leave it at 1.0"
            )
        self.setup()
        decode_samples(self.train_set.dataset)

    def build_splits(self):
        images = ImageFiles(image_files(Path(self.root)), "L" if self.in_chans == 1 else "RGB")
        log.info(f"{self.root}: {len(images):,} images, no labels")
        train, val = self._hold_out(images)
        return train, val, val
