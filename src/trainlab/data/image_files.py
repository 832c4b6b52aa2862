"""The images of a folder, and what they say of themselves: every image under a root at any
depth, and the channels and size ``data=folder`` reads from them when the config gives none.

OmegaConf resolvers (``${folder_channels:...}``, ``${folder_size:...}`` in
configs/data/folder.yaml), not data-module code, because the encoder is built from the same
values (``${data.in_chans}``, ``${data.image_size}``) before any data module exists. Only
image headers are read (PIL opens lazily): a second for thousands of files. PIL and
torchvision are imported when a folder is read: registering the resolvers imports neither.
"""

import functools
import random
import statistics
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from trainlab.utils.errors import DataError
from trainlab.utils.logging import get_logger

log = get_logger(__name__)

#: PIL modes without colour.
GRAY = {"1", "L", "LA", "I", "I;16", "F"}
#: Images whose headers the resolvers read, drawn by seed 0 (the same on every rank).
SAMPLE = 64
#: The measured size is at most this (ViTs' 224 px) and a multiple of ROUND.
LARGEST, ROUND = 224, 8


@functools.cache
def image_files(root: Path) -> list[Path]:
    """Every image under ``root`` at any depth, sorted (the same split on every rank); read
    once a process."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    if not root.is_dir():
        what = "a file" if root.exists() else "missing"
        raise DataError(f"data.root={root} is {what}: give the folder that holds the images")
    files = [p for p in root.rglob("*") if not p.is_dir()]  # a FIFO is skipped, never opened
    images = sorted(
        p
        for p in files
        if p.is_file() and p.suffix.lower() in IMG_EXTENSIONS and not p.name.startswith(".")
    )
    if skipped := len(files) - len(images):
        kept = set(images)
        examples = [p.name for p in files if p not in kept][:3]
        log.warning(f"{root}: skipped {skipped} files that are not images, e.g. {examples}")
    if len(images) < 2:
        raise DataError(
            f"data.root={root} holds {len(images)} image(s) ({', '.join(IMG_EXTENSIONS)}): "
            "training and validation need at least 2"
        )
    return images


@functools.cache
def measured(root: str) -> tuple[int, int]:
    """(channels, size) from the headers of SAMPLE images: 1 channel when every one is gray,
    else 3; the median shorter side, rounded down to a multiple of ROUND, at most LARGEST."""
    from PIL import Image

    paths = image_files(Path(root))
    sample = random.Random(0).sample(paths, min(SAMPLE, len(paths)))
    modes, sides = set(), []
    for path in sample:
        try:
            with Image.open(path) as image:
                modes.add(image.mode)
                sides.append(min(image.size))
        except OSError as e:
            raise DataError(f"{path} cannot be read as an image ({e}): remove it") from e
    channels = 1 if modes <= GRAY else 3
    return channels, max(ROUND, min(LARGEST, int(statistics.median(sides))) // ROUND * ROUND)


def register() -> None:
    for name, index in (("folder_channels", 0), ("folder_size", 1)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, lambda root, i=index: measured(str(root))[i])


def pin_measured(cfg: DictConfig) -> None:
    """``data.in_chans`` and ``data.image_size`` as the numbers measured, where the config
    reads them from the folder, said in one line: the run's config.yaml then holds numbers,
    which a copied run dir and ``eval.py`` read where the folder is gone or has changed."""
    data = cfg.get("data")
    if not isinstance(data, DictConfig):
        return
    raw = OmegaConf.to_container(data, resolve=False)
    read = [k for k in ("in_chans", "image_size") if "${folder_" in str(raw.get(k))]
    for key in read:
        data[key] = data[key]
    if read:
        values = ", ".join(f"data.{k}={data[k]}" for k in read)
        read_from = min(SAMPLE, len(image_files(Path(data.root))))
        log.info(
            f"{data.root}: {values}, read from {read_from} of its images (give them to choose)"
        )
