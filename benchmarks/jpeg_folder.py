"""An ImageNet-like JPEG folder for the data benchmarks: ``make_folder`` writes it, ``COMMON``
is what a data module reading it gets (224 px crops, ImageNet's statistics)."""

from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = 10
BATCH = 64
# What both data modules get: ImageNet-sized crops and statistics.
COMMON = dict(
    image_size=224,
    in_chans=3,
    num_classes=CLASSES,
    mean=(0.485, 0.456, 0.406),
    std=(0.229, 0.224, 0.225),
    batch_size=BATCH,
    crop_scale=(0.3, 1.0),
)


def make_folder(
    root: Path,
    images: int,
    seed: int = 0,
    width: tuple[int, int] = (320, 480),
    height: tuple[int, int] = (240, 400),
    first: int = 0,
) -> int:
    """``images`` JPEGs (quality 90, ``width`` x ``height`` px, smooth colour fields with
    grain: about 75 KB each at the default sizes, ImageNet's average is about 110 KB) as
    train/<class>/ and, where ``first`` is 0, a small val/; returns the bytes of train/.
    ``first``: the number of the first file, so that several processes can fill one folder."""
    rng = np.random.default_rng(seed)
    for split, n in (("train", images), ("val", CLASSES if first == 0 else 0)):
        for i in range(first, first + n):
            folder = root / split / f"class{i % CLASSES}"
            folder.mkdir(parents=True, exist_ok=True)
            w, h = (
                int(rng.integers(width[0], width[1] + 1)),
                int(rng.integers(height[0], height[1] + 1)),
            )
            coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8))
            field = np.asarray(coarse.resize((w, h), Image.BICUBIC), dtype=np.int16)
            grain = rng.integers(-45, 46, (h, w, 3), dtype=np.int16)
            image = np.clip(field + grain, 0, 255).astype(np.uint8)
            Image.fromarray(image).save(folder / f"{i}.jpg", quality=90)
    return sum(p.stat().st_size for p in (root / "train").rglob("*.jpg"))
