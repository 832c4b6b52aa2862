"""An ImageFolder tree: ``root/train/<class>/*`` and ``root/val/<class>/*`` (ImageNet's layout).

Real folders hold stray files (a .gif placeholder, a README.txt): files without an image
extension are skipped and counted in the log, not silently. An image that cannot be
decoded stops the run with its path, since training on a silently shrunken data set is
worse than stopping.
"""

from functools import partial
from pathlib import Path

import torch
from PIL import Image
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS

from trainlab.data.base import ImageDataModule
from trainlab.utils.errors import DataError
from trainlab.utils.logging import get_logger

log = get_logger(__name__)


def load_image(path: str, mode: str = "RGB") -> Image.Image:
    """The image at ``path`` in PIL ``mode``: "RGB", or "L" for gray folders (data.in_chans=1)."""
    try:
        with open(path, "rb") as f:
            return Image.open(f).convert(mode)
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read image {path} ({e}): delete or replace the file") from None


def decode_samples(dataset, count: int = 32) -> None:
    """Decode ``count`` images of ``dataset`` drawn at random (seed 0), before the run dir
    exists: a folder of corrupt files is refused with a path; one bad file among a million
    still stops the run later, with its path, and leaves no on_exception.ckpt."""
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))
    for index in order[:count].tolist():
        dataset[index]  # DataError with its path where it cannot be decoded


def open_split(root: Path, split: str, mode: str = "RGB") -> ImageFolder:
    folder = root / split
    if not folder.is_dir():
        raise DataError(
            f"no {split} folder at {folder}: expected {root}/{split}/<class>/<image> "
            f"(set data.root to the folder that holds train/ and val/)"
        )
    try:
        dataset = ImageFolder(str(folder), loader=partial(load_image, mode=mode))
    except FileNotFoundError as e:  # no class folders, or a class folder with no image
        classes = [p for p in folder.iterdir() if p.is_dir()]
        empty = sorted(p.name for p in classes if not any(p.iterdir()))
        if 0 < len(empty) < len(classes):
            raise DataError(
                f"class folder(s) {', '.join(empty)} under {folder} hold no images: add "
                "images or remove the folder(s)"
            ) from None
        raise DataError(f"no images under {folder} ({e})") from None
    n_files = sum(1 for p in folder.rglob("*") if p.is_file())
    skipped = n_files - len(dataset)
    if skipped:
        examples = [
            p.name
            for p in folder.rglob("*")
            if p.is_file() and p.suffix.lower() not in IMG_EXTENSIONS
        ][:3]
        log.warning(f"{folder}: skipped {skipped} files that are not images, e.g. {examples}")
    return dataset


class ImageFolderDataModule(ImageDataModule):
    """Train on ``root/train``; ``root/val`` serves as both validation and test split,
    as for ImageNet whose test labels are not public. Set ``val_fraction`` > 0 with
    ``holdout_val=true`` to carve validation out of train instead and keep val for test.
    """

    name = "imagefolder"

    def __init__(self, holdout_val: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.holdout_val = holdout_val

    def check(self) -> None:
        for split in ("train", "val"):
            folder = Path(self.root) / split
            if not folder.is_dir():
                raise DataError(
                    f"no {split} folder at {folder}: expected {self.root}/{split}/<class>/<image> "
                    f"(set data.root to the folder that holds train/ and val/)"
                )
        self.setup()  # the class folders, their images and data.num_classes, checked
        classes = self.train_set.dataset
        while hasattr(classes, "dataset"):  # a held-out or low-shot Subset of the folder
            classes = classes.dataset
        if len(classes.classes) < 2:
            raise DataError(
                f"{self.root}/train holds {len(classes.classes)} class folder: probes and "
                "classifiers need at least 2 (one folder per class)"
            )
        for split in (self.train_set, self.test_set):
            decode_samples(split.dataset)

    def build_splits(self):
        root = Path(self.root)
        mode = "L" if self.in_chans == 1 else "RGB"
        train, val = open_split(root, "train", mode), open_split(root, "val", mode)
        if train.classes != val.classes:
            only_train = sorted(set(train.classes) - set(val.classes)) or "-"
            only_val = sorted(set(val.classes) - set(train.classes)) or "-"
            raise DataError(
                f"train/ and val/ under {root} have different class folders (only in "
                f"train/: {', '.join(only_train)}; only in val/: {', '.join(only_val)}): "
                "make them match"
            )
        if len(train.classes) != self.num_classes:
            raise DataError(
                f"{root}/train has {len(train.classes)} class folders but "
                f"data.num_classes={self.num_classes}: set data.num_classes={len(train.classes)}"
            )
        return train, (None if self.holdout_val else val), val
