"""Training batches as uint8 from the loader workers vs float32, at ViT-Small/224, and the
I-JEPA step they feed.

The image folder of benchmarks/jpeg_folder.py (JPEGs, ImageNet-like sizes) through
data=imagefolder's training loader (224 px random-resized crops), with
``uint8_batches`` on (normalised after the transfer, as Lightning's
``on_after_batch_transfer`` does in a run) and off (normalised in the workers, float32
through the worker queues). Both take turns in every repeat; medians. The I-JEPA step of
ViT-Small/16 at 224 px on the same machine says whether the loader can keep up.

    python -m benchmarks.collation [--images 512] [--repeats 3] [--workers 2]
"""

import argparse
import json
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import torch

from benchmarks import step
from benchmarks.jpeg_folder import COMMON, make_folder
from trainlab.data.imagefolder import ImageFolderDataModule


def loader_images_per_s(folder: Path, uint8_batches: bool, workers: int) -> tuple[float, int]:
    """One epoch, normalisation included; returns images/s and the bytes of one batch."""
    data = ImageFolderDataModule(
        root=str(folder), num_workers=workers, uint8_batches=uint8_batches, **COMMON
    )
    data.setup()
    start, seen, nbytes = time.perf_counter(), 0, 0
    for batch in data.train_dataloader():
        nbytes = batch[0].element_size() * batch[0].nelement()
        images, _ = data.on_after_batch_transfer(batch, 0)
        seen += len(images)
    return seen / (time.perf_counter() - start), nbytes


def vit_small_ijepa():
    """I-JEPA with ViT-Small/16 at 224 px: a 14x14 grid, the paper's masks."""
    from trainlab.model.ijepa import IJEPA
    from trainlab.networks.multiblock_masks import MultiBlockMaskGenerator
    from trainlab.networks.predictor import Predictor
    from trainlab.networks.vit import ViTEncoder

    torch.manual_seed(0)
    return IJEPA(
        ViTEncoder(img_size=224, patch_size=16, in_chans=3, size="vit_small"),
        partial(Predictor, pred_dim=192, depth=6, num_heads=6),
        partial(MultiBlockMaskGenerator, min_keep=10),
        optimizer=partial(torch.optim.AdamW, lr=1e-4),
        num_classes=10,
    )


def step_samples_per_s(batch: int = 8) -> float:
    """trainlab's eager step (benchmarks/step.py's loop) on that model."""
    g = torch.Generator().manual_seed(0)
    images = torch.randn(batch, 3, 224, 224, generator=g)
    labels = torch.randint(0, 10, (batch,), generator=g)
    return step.loop_rate(vit_small_ijepa, images, labels, steps=3, warmup=1)[0]


def bench(images: int = 512, repeats: int = 3, workers: int = 2) -> dict:
    rates = {"float32": [], "uint8": []}
    nbytes = {}
    with tempfile.TemporaryDirectory() as tmp:
        make_folder(Path(tmp), images)
        for _ in range(repeats):
            for name in rates:
                rate, nbytes[name] = loader_images_per_s(Path(tmp), name == "uint8", workers)
                rates[name].append(rate)
    return {
        "images": images,
        "workers": workers,
        "batch": COMMON["batch_size"],
        "loader": {name: statistics.median(r) for name, r in rates.items()},
        "batch_mib": {name: b / 2**20 for name, b in nbytes.items()},
        "step": step_samples_per_s(),
    }


def table(result: dict) -> str:
    loader, mib = result["loader"], result["batch_mib"]
    rows = [
        f"| float32 batches (normalised in the workers) | {loader['float32']:.1f} | "
        f"{mib['float32']:.1f} | 1.00x |",
        f"| uint8 batches (normalised after the transfer) | {loader['uint8']:.1f} | "
        f"{mib['uint8']:.1f} | {loader['uint8'] / loader['float32']:.2f}x |",
        f"| I-JEPA step, ViT-Small/16 at 224 px (samples/s) | {result['step']:.1f} | - | - |",
    ]
    header = "| loader / step | images/s | MiB per batch | vs float32 |\n|---|---|---|---|"
    return header + "\n" + "\n".join(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    result = bench(args.images, args.repeats, args.workers)
    print(json.dumps(result, indent=2))
    print(table(result))
