"""Images/s delivered to the training loop: JPEG image folder vs litdata shards on local
disk vs the same shards from an S3 store on loopback (trainlab/data/loopback_s3.py).

All three go through trainlab's data modules (data=imagefolder, data=stream) with the
same decode, the same transforms (224 px random-resized crop, as for ImageNet), the same
batch size and the same number of loader workers; one epoch per measurement, loader
start-up included. S3 is measured with an empty cache (every chunk downloaded) and in a
second epoch that reads the cache. Sources take turns in every repeat; medians.
Written to benchmarks/stream.md (the streaming part's results, docs/parts/stream.md):

    python -m benchmarks.stream [--images 2000] [--repeats 3] [--workers 2]
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from benchmarks.jpeg_folder import BATCH, COMMON, make_folder
from trainlab.data.loopback_s3 import loopback_s3
from trainlab.utils.machine import machine

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
RESULTS = Path(__file__).resolve().parent / "stream.md"


def make_shards(folder: Path, out: Path, chunk_mb: float = 8) -> dict:
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "make_shards.py"), str(folder), str(out)]
        + ["--chunk-mb", str(chunk_mb), "--workers", "2"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout[result.stdout.index("{") :])


def images_per_s(loader) -> float:
    """One epoch of (images, labels) batches, from creating the iterator to the last one."""
    start, seen = time.perf_counter(), 0
    for images, _ in loader:
        seen += len(images)
    return seen / (time.perf_counter() - start)


def bench(images: int = 2000, repeats: int = 3, workers: int = 2) -> dict:
    from trainlab.data.imagefolder import ImageFolderDataModule
    from trainlab.data.stream import StreamDataModule

    loader = dict(num_workers=workers, persistent_workers=False, pin_memory=False)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folder_bytes = make_folder(tmp / "folder", images)
        shards = make_shards(tmp / "folder", tmp / "shards")
        rates = {"imagefolder": [], "local": [], "s3_cold": [], "s3_cached": []}
        with loopback_s3(tmp) as s3, mock.patch.dict(os.environ, s3.env):  # for the workers
            s3.upload(tmp / "shards", "s3://bench/shards")
            for r in range(repeats):
                folder = ImageFolderDataModule(root=str(tmp / "folder"), **COMMON, **loader)
                folder.setup()
                rates["imagefolder"].append(images_per_s(folder.train_dataloader()))
                local = StreamDataModule(root=str(tmp / "shards"), **COMMON, **loader)
                local.setup()
                rates["local"].append(images_per_s(local.train_dataloader()))
                remote = StreamDataModule(
                    root="s3://bench/shards", cache_dir=str(tmp / f"cache{r}"), **COMMON, **loader
                )
                remote.setup()
                stream = remote.train_dataloader()
                rates["s3_cold"].append(images_per_s(stream))  # downloads every chunk
                rates["s3_cached"].append(images_per_s(stream))  # the next epoch: the cache
    median = {k: statistics.median(v) for k, v in rates.items()}
    return {
        "images": images,
        "train_mb": folder_bytes / 2**20,
        "chunks": shards["train"]["chunks"],
        "shard_images_per_s": shards["train"]["images_per_s"],
        "repeats": repeats,
        "workers": workers,
        "rates": rates,
        "median": median,
    }


def table(result: dict) -> str:
    base = result["median"]["imagefolder"]
    rows = {
        "imagefolder": "ImageFolder JPEGs (data=imagefolder)",
        "local": "litdata shards, local disk (data=stream)",
        "s3_cold": "litdata shards, loopback S3, empty cache",
        "s3_cached": "litdata shards, loopback S3, next epoch (cache)",
    }
    lines = [
        f"{result['images']} JPEGs ({result['train_mb']:.0f} MB, "
        f"{result['train_mb'] * 1024 / result['images']:.0f} KB each, 320-480 px), "
        f"{result['chunks']} chunks of about 8 MB (make_shards.py wrote "
        f"{result['shard_images_per_s']:.0f} images/s); 224 px random-resized crops, batch "
        f"{BATCH}, {result['workers']} loader workers; median of {result['repeats']} epochs "
        f"each, loader start-up included; the S3 server (moto) shares the machine's cores.",
        "",
        "| source | images/s | vs ImageFolder |",
        "|---|---|---|",
    ]
    for key, name in rows.items():
        rate = result["median"][key]
        lines.append(f"| {name} | {rate:.0f} | {rate / base:.2f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    result = bench(args.images, args.repeats, args.workers)
    print(json.dumps(result["rates"], indent=1))
    RESULTS.write_text(
        f"""# Benchmark: image folder vs shards vs S3 (benchmarks/stream.py)

Written by `python -m benchmarks.stream` on {datetime.date.today()}.
Machine: {machine()}.
Images/s delivered to the training loop by trainlab's data modules.

{table(result)}
"""
    )
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
