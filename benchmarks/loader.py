"""The training loader alone, images/s at 224 px by data set and worker count, and the
loader workers a GPU needs at a given step rate.

- data=synthetic: uint8 images already at size, no PIL (the synthetic data part, built from
  configs/data/synthetic.yaml where the part is there);
- data=fake: torchvision's FakeData, a PIL image drawn per sample, then cropped;
- an ImageNet-like JPEG folder (benchmarks/jpeg_folder.py) through data=imagefolder:
  decode, 0.3-1.0 random-resized crop to 224, uint8.

Each loader runs its batches once, after one batch of warm-up (worker start-up); the batches
are normalised as a run does after the transfer. Workers per GPU = step rate x seconds per
image on one worker (the 0-worker row: the main process decodes alone).

    python -m benchmarks.loader [--workers 0 2] [--step-rate 480]
"""

import argparse
import tempfile
import time
from pathlib import Path

import hydra
from omegaconf import OmegaConf

from benchmarks.jpeg_folder import COMMON, make_folder
from trainlab.data.fake import FakeDataModule
from trainlab.data.imagefolder import ImageFolderDataModule
from trainlab.utils.machine import machine

SYNTHETIC = Path(__file__).resolve().parents[1] / "configs" / "data" / "synthetic.yaml"

# Batches timed per loader: FakeData and JPEG decoding cost tens of ms per image on one core.
BATCHES = {"synthetic": 20, "fake": 2, "jpeg folder": 2}


def images_per_s(data, batches: int) -> float:
    data.setup()
    loader = iter(data.train_dataloader())
    next(loader)  # worker start-up stays out of the timing
    start = time.perf_counter()
    for _ in range(batches):
        images, _ = data.on_after_batch_transfer(next(loader), 0)
    return batches * len(images) / (time.perf_counter() - start)


def bench(workers=(0, 2)) -> dict[str, dict[int, float]]:
    """{loader: {workers: images/s}}."""
    common = {**COMMON, "crop_scale": None}
    with tempfile.TemporaryDirectory() as tmp:
        make_folder(Path(tmp), images=COMMON["batch_size"] * (BATCHES["jpeg folder"] + 1))
        makers = {
            "synthetic": lambda w: hydra.utils.instantiate(
                OmegaConf.load(SYNTHETIC), num_workers=w, train_size=10**5, **common
            ),
            "fake": lambda w: FakeDataModule(num_workers=w, train_size=10**5, **COMMON),
            "jpeg folder": lambda w: ImageFolderDataModule(root=tmp, num_workers=w, **COMMON),
        }
        if not SYNTHETIC.exists():
            del makers["synthetic"]
        rates = {name: {} for name in makers}
        for n in workers:
            for name, make in makers.items():
                rates[name][n] = images_per_s(make(n), BATCHES[name])
    return rates


def markdown(rates: dict[str, dict[int, float]], step_rate: float) -> str:
    workers = sorted(next(iter(rates.values())))
    rows = "\n".join(
        f"| {name} | {' | '.join(f'{by[w]:,.0f}' for w in workers)} "
        f"| {1000 / by[0]:.1f} | {step_rate / by[0]:.1f} |"
        for name, by in rates.items()
    )
    return f"""Machine: {machine()}. 224 px RGB, batch {COMMON["batch_size"]}, images/s of the
training loader alone (normalisation after the transfer included); ms per image and
workers per GPU from the 0-worker column (one process decoding), at a step of
{step_rate:.0f} samples/s per GPU (the eager target at ViT-H/14).

| loader | {" | ".join(f"{w} workers" for w in workers)} | ms per image, one worker | workers per GPU at {step_rate:.0f}/s |
|---|{"---|" * len(workers)}---|---|
{rows}
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", nargs="+", type=int, default=[0, 2])
    parser.add_argument("--step-rate", type=float, default=480.0)
    args = parser.parse_args()
    print(markdown(bench(args.workers), args.step_rate))


if __name__ == "__main__":
    main()
