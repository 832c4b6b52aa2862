"""What ``python train.py experiment=ijepa trainer.devices=8`` chooses on the GPUs people have:
the memory fit (memory_fit/fit.py) of the paper's ViT-H/14 at 256 images per GPU (global
batch 2048 over 8), decided on this CPU as every run decides it before its run dir.
Writes benchmarks/fit_table.md; the README's table is its copy.

    python -m benchmarks.fit_table
"""

from pathlib import Path

import hydra
import torch
from hydra import compose, initialize_config_dir

from trainlab.memory_fit.estimate import GIB, estimate_peak
from trainlab.memory_fit.fit import AUTOCAST, decide, random_inputs
from trainlab.utils.machine import machine

ROOT = Path(__file__).resolve().parents[1]
# Total memory as torch reports it (GiB): 40 GB A100, 80 GB H100, 141 GB H200.
DEVICES = {"A100 40 GB": 39.4, "H100 80 GB": 79.6, "H200 141 GB": 140.4}
WORLD = 8


def main() -> None:
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", ["experiment=ijepa", f"trainer.devices={WORLD}"])
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.batch_size = cfg.data.global_batch_size // WORLD
    model = hydra.utils.instantiate(cfg.model)
    dtype = AUTOCAST[cfg.trainer.precision]
    estimate = estimate_peak(
        model,
        lambda n: random_inputs(datamodule, n),
        datamodule.batch_size,
        lambda: torch.autocast("cpu", dtype=dtype),
    )
    rows = []
    for name, gib in DEVICES.items():
        cfg.memory_fit.device_gib = gib
        fit = decide(
            cfg,
            model,
            datamodule,
            WORLD,
            cfg.memory_fit.policy,
            gib,
            cfg.memory_fit.margin,
            estimate,
        )
        per_device = datamodule.batch_size // fit.accumulate_grad_batches
        rows.append(
            f"| {name} | {gib} | {fit.accumulate_grad_batches} | {per_device} | "
            f"{estimate.at(per_device).peak / GIB:.1f} |"
        )
    text = f"""# The headline command's memory fit, by GPU

Written by `python -m benchmarks.fit_table` on {machine()}.
`python train.py experiment=ijepa trainer.devices=8`: ViT-H/14 at 224 px, predictor
12 x 384, bf16-mixed, global batch {cfg.data.global_batch_size}, {datamodule.batch_size}
images per GPU as configured. The estimated peak at {datamodule.batch_size} images:
{estimate.peak / GIB:.1f} GiB (weights {estimate.weights / GIB:.1f}, gradients and AdamW
{estimate.trained / GIB:.1f}, activations {estimate.activations / GIB:.1f}); at 128 images
{estimate.at(128).peak / GIB:.1f} GiB, where an H100 measured 46.5 with fixed-shape masks and
an H200 51.2 with the paper's (benchmarks/gpu.md; the H200's from an earlier GPU session). Each GPU keeps
memory_fit.margin={cfg.memory_fit.margin} of its memory free; the default policy
(accumulate) takes the smallest accumulation that fits.

| GPU | memory (GiB) | trainer.accumulate_grad_batches | images per GPU a step | estimated peak (GiB) |
|---|---|---|---|---|
{chr(10).join(rows)}
"""
    (ROOT / "benchmarks" / "fit_table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
