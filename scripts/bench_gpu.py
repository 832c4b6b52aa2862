"""`make bench-gpu`: the benchmarks that need a CUDA GPU; results go to BENCHMARKS_GPU.md.

1. MFU at ViT-H/14 in bf16, eager and with compile=true: the run BENCHMARKS.md's GPU section
   describes, through `python train.py`, read from the run's logged intervals.
2. BENCHMARKS.md's I-JEPA step table (trainlab/bench/step.py) on the GPU, at ViT-B/16 and
   224 px with a paper-sized predictor: the reference-style loop against trainlab's step.

`--quick` runs both at toy sizes on whatever device there is, to check that they run.
"""

import argparse
import csv
import datetime
import shutil
import statistics
import subprocess
import sys
import traceback
from functools import partial
from pathlib import Path

import torch

from trainlab.bench import machine, step
from trainlab.bench.model import make_ijepa

ROOT = Path(__file__).resolve().parents[1]

# Shapes: (encoder, predictor, batch). The paper's predictor for ViT-B is 6 x 384.
FULL = (dict(img_size=224, patch_size=16, in_chans=3, size="vit_base"), (384, 6, 12), 64)
# Timed steps, warm-up steps and repeats of the step table. In the first run 10 timed bf16
# steps took half a second on an H200 after 3 of warm-up, and single repeats ranged from
# 0.21x to 2.11x (BENCHMARKS_GPU.md): longer timings, and more warm-up for lazy kernel
# loading, since then (not yet run on a GPU).
STEPS, WARMUP, REPEATS = 30, 5, 3
PARTS = ("mfu_eager", "steps", "mfu_compile")
QUICK = (dict(img_size=32, patch_size=4, in_chans=3, size="vit_tiny", depth=2), (96, 1, 4), 8)


def step_table(quick: bool, device: str, compiled: bool) -> str:
    encoder_kwargs, predictor, batch = QUICK if quick else FULL
    g = torch.Generator().manual_seed(0)
    size = encoder_kwargs["img_size"]
    images = torch.randn(batch, 3, size, size, generator=g)
    labels = torch.randint(0, 10, (batch,), generator=g)
    times = step.bench(
        # min_keep: the paper's 10 at 224 px; the toy grid holds fewer tokens
        partial(make_ijepa, encoder_kwargs, predictor, min_keep=10 if size >= 224 else 2),
        images,
        labels,
        steps=5 if quick else STEPS,
        warmup=3 if quick else WARMUP,
        repeats=1 if quick else REPEATS,
        device=device,
        compiled=compiled,
    )
    rows = "\n".join(
        f"| {name} | {rate:.1f} | {'-' if tokens is None else f'{tokens:,.0f}'} "
        f"| {ratio:.2f}x | {low:.2f}-{high:.2f}x |"
        for name, (rate, tokens, (ratio, low, high)) in times.items()
    )
    return f"""## I-JEPA training step on the GPU (trainlab/bench/step.py)

BENCHMARKS.md's step table on the GPU: the same batch and masks every step in every
variant, ViT-B/16 at 224 px, batch 64, predictor 6 x 384, 4 targets (the paper's settings),
medians of {REPEATS} repeats of {STEPS} timed steps after {WARMUP} of warm-up, the GPU
synchronised before each clock reading; float32 rows without TF32 (torch's default). In
bf16 trainlab keeps torch's fused attention kernel, where the reference writes it out.

| variant | samples/s | tokens/s | vs reference-style, same precision (median) | range over repeats |
|---|---|---|---|---|
{rows}
"""


def mfu_run(quick: bool, compiled: bool, peak_tflops: float | None) -> str:
    """One train.py run; its section: the command and the medians of its logged rates over
    the intervals after the first (which holds start-up and compilation)."""
    name = f"mfu_h14_{'compile' if compiled else 'eager'}"
    command = [
        sys.executable, "train.py", "experiment=ijepa", "data=fake",
        "data.global_batch_size=null", "trainer.limit_val_batches=0", "test=false",
        "features.enabled=false", f"compile={str(compiled).lower()}", "task_name=bench_gpu",
        f"run_name={name}", "trainer.log_every_n_steps=10", "extras.print_config=false",
    ]  # fmt: skip
    if quick:
        command += [
            "data.image_size=28", "data.train_size=64", "data.batch_size=8",
            "data.num_workers=0", "trainer.max_steps=20", "model.encoder.depth=1",
            "model.predictor.depth=1", "model.masks.min_keep=1", "model.masks.num_targets=1",
            "model.masks.target_scale=[0.25,0.25]", "trainer.precision=32-true",
        ]  # fmt: skip
        if not torch.cuda.is_available():
            command += ["trainer.accelerator=cpu", "peak_tflops=1.0"]
    else:
        command += [
            "data.image_size=224", "data.train_size=16384", "data.batch_size=128",
            "data.num_workers=12", f"trainer.max_steps={60 if compiled else 40}",
        ]  # fmt: skip
    if peak_tflops:
        command.append(f"peak_tflops={peak_tflops}")
    run_dir = ROOT / "logs" / "bench_gpu" / "runs" / name
    if run_dir.exists():  # a re-run of the benchmark replaces its own run
        shutil.rmtree(run_dir)
    subprocess.run(command, cwd=ROOT, check=True)
    rows = [
        row
        for path in run_dir.rglob("metrics.csv")
        for row in csv.DictReader(path.open())
        if row.get("train/samples_per_s")
    ][1:]
    med = {
        key: statistics.median(float(row[key]) for row in rows)
        for key in ["train/samples_per_s", "train/tokens_per_s", "train/tflops_per_s", "train/mfu"]
        if rows and all(row.get(key) for row in rows)
    }
    if not med.get("train/mfu"):
        return f"### {name}\n\n    python {' '.join(command[1:])}\n\nNo MFU was logged.\n"
    peak = med["train/tflops_per_s"] / med["train/mfu"]
    return f"""### {"compile=true" if compiled else "eager"}

    python {" ".join(command[1:])}

| samples/s | tokens/s | TFLOP/s | MFU (of {peak:.0f} TFLOP/s) | logged intervals |
|---|---|---|---|---|
| {med["train/samples_per_s"]:.1f} | {med["train/tokens_per_s"]:,.0f} | {med["train/tflops_per_s"]:.1f} | {med["train/mfu"]:.3f} | {len(rows)} |
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy sizes: check that it runs")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the GPU's dense bf16 peak, where neither trainlab nor "
                        "Lightning knows it")  # fmt: skip
    parser.add_argument("--out", default=str(ROOT / "BENCHMARKS_GPU.md"))
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS),
                        help="which measurements to run, in this order")  # fmt: skip
    parser.add_argument("--no-compiled-steps", action="store_true",
                        help="leave the compiled rows out of the step table (about a minute "
                        "of compiling each)")  # fmt: skip
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.quick:
        sys.exit("error: no CUDA GPU here: run make bench-gpu on a GPU machine (or --quick)")
    sections = [
        f"""# GPU benchmarks

Written by `make bench-gpu` (scripts/bench_gpu.py) on {datetime.date.today()}{" (--quick: toy sizes)" if args.quick else ""}.
Machine: {machine()}.

## MFU at ViT-H/14, bf16 (through train.py)

The paper's encoder (ViT-H/14 at 224 px, predictor 12 x 384, 4 targets) in bf16-mixed on
FakeData, batch 128, rates logged every 10 steps by trainlab.callbacks.run_stats: medians
over the logged intervals after the first, which holds start-up and compilation. FLOPs
are IJEPA.count_work's (the target encoder's forward, the context encoder's forward and
backward, the predictor's), MFU against the GPU's dense bf16 peak.
"""
    ]
    # Each part is written as soon as it ends: a run cut short keeps what it measured.
    parts = {
        "mfu_eager": partial(mfu_run, args.quick, False, args.peak_tflops),
        "steps": partial(step_table, args.quick, device, not args.no_compiled_steps),
        "mfu_compile": partial(mfu_run, args.quick, True, args.peak_tflops),
    }
    failed = 0
    for part in (parts[name] for name in args.parts):
        try:
            sections.append(part())
        except Exception as error:  # the other parts still run; the exit status says so
            traceback.print_exc()
            sections.append(f"Failed: {type(error).__name__}: {error}\n")
            failed += 1
        print(sections[-1], flush=True)
        Path(args.out).write_text("\n".join(sections))
    print(f"wrote {args.out}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
