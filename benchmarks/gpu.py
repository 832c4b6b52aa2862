"""scripts/gpu_check.sh: what needs a CUDA GPU; benchmarks/gpu.md. A part: docs/parts/gpu_check.md.

Parts (--parts picks, in order; each is written to the file as soon as it ends):
- mfu_eager, mfu_compile: (a) MFU at ViT-H/14 in bf16 through `python train.py`, the
  paper's masks, read from the run's logged intervals, with the time start-up and
  compilation add to the first interval and a profile of 5 steady steps (GPU-busy fraction,
  top kernels, host syncs by line: callbacks/step_profile.py);
- reference: the reference-style I-JEPA step (how the official code runs it:
  benchmarks/step.py) in bf16 on the same model and masks, for the ratio of real TFLOP/s;
- jpeg_folder: compile=true again on an ImageNet-like JPEG folder (data=imagenet's
  ImageFolder, decoded by the loader's workers) beside the data=synthetic run;
- mfu_fsdp_bf16: the eager MFU run with bf16 weights once a step (FSDP2's mixed precision)
  in place of bf16 autocast, which casts the weights at every product and leaves LayerNorm,
  GELU and the residual adds in float32;
- memory: (b) peak memory of experiment=ijepa's model at 128 and 256 per GPU, with and
  without activation checkpointing, next to the estimate a run prints;
- resume: (c) bf16-mixed, SIGTERM at step 3 and resume, losses against an uninterrupted run;
- fsdp: (d) FSDP2 on one rank, 20 steps;
- gloo_powersgd: (e) 2 processes on one GPU over gloo with the PowerSGD hook, and
  SyncBatchNorm's running statistics on both ranks against one BatchNorm on the whole batch;
- steps: benchmarks/ijepa.md's I-JEPA step table on the GPU (not in gpu_check.sh: its minutes).

`--quick` runs them at toy sizes on whatever device there is, to check that they run."""

import argparse
import csv
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from functools import partial
from pathlib import Path

import torch

from benchmarks import step
from benchmarks.model import make_ijepa
from trainlab.utils.machine import machine

ROOT = Path(__file__).resolve().parents[1]

# Shapes: (encoder, predictor, batch): the paper's ViT-H/14 recipe, batch 128 per GPU.
FULL = (dict(img_size=224, patch_size=14, in_chans=3, size="vit_huge"), (384, 12, 12), 128)
# Timed steps, warm-up steps and repeats of the step table. In the first run 10 timed bf16
# steps took half a second on an H200 after 3 of warm-up, and single repeats ranged from
# 0.21x to 2.11x (benchmarks/gpu.md): longer timings, and more warm-up for lazy kernel
# loading, since then (not yet run on a GPU).
# At ViT-H/14 a step takes about 0.3 to 0.6 s on an H100/H200: 10 timed steps after 6 of
# warm-up, 3 repeats (the issue-47 measurement's blocks) keep the table to a few minutes.
STEPS, WARMUP, REPEATS = 10, 6, 3
PARTS = (
    "mfu_eager", "mfu_compile", "reference", "jpeg_folder", "memory", "headline_fit",
    "mfu_fsdp_bf16", "resume", "fsdp",
    "gloo_powersgd", "steps",
)  # fmt: skip
# What the parts measured, for the closing table: {part: {number: value}}.
RESULTS: dict[str, dict[str, float]] = {}
# The targets the closing table holds the numbers against (the paper's step, compiled).
TARGETS = {
    "MFU, compile=true": (">=", 0.40),
    "MFU, eager": (">=", 0.30),
    "start-up and compilation beyond steady steps, compile=true (s)": ("<=", 30.0),
    "real TFLOP/s, compile=true over the reference-style step": (">=", 1.6),
    "samples/s, JPEG folder over data=synthetic (compile=true)": (">=", 0.9),
    "MFU, eager: FSDP2 bf16 weights over bf16 autocast": (">=", 1.0),
    "peak memory, measured over the fit decision's estimate (largest of (b))": ("<=", 1.1),
    "exit code, one GPU of the 8-GPU command (no out of memory)": ("<=", 0),
}
# bf16 weights once a step: FSDP2's mixed-precision policy on one rank or many.
FSDP_BF16 = ["strategy=fsdp", "strategy.param_dtype=bfloat16", "strategy.reduce_dtype=float32"]
LOADER_WORKERS = 14  # of the GPU machine's 16 cores: two for the training process
QUICK = (dict(img_size=32, patch_size=4, in_chans=3, size="vit_tiny", depth=2), (96, 1, 4), 8)


def step_table(quick: bool, device: str, compiled: bool) -> str:
    encoder_kwargs, predictor, batch = QUICK if quick else FULL
    g = torch.Generator().manual_seed(0)
    size = encoder_kwargs["img_size"]
    images = torch.randn(batch, 3, size, size, generator=g)
    labels = torch.randint(0, 10, (batch,), generator=g)
    times = step.bench(
        # min_keep: the paper's 10 at 224 px; the toy grid holds fewer tokens. The paper's
        # masks (every variant reads the same masks).
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
    return f"""## I-JEPA training step on the GPU (benchmarks/step.py)

benchmarks/ijepa.md's step table on the GPU: the same batch and masks every step in every
variant, ViT-H/14 at 224 px, batch 128, predictor 12 x 384, 4 targets, the paper's masks
(experiment=ijepa's settings),
medians of {REPEATS} repeats of {STEPS} timed steps after {WARMUP} of warm-up, the GPU
synchronised before each clock reading; bf16 rows only on a GPU (through Lightning: the
MFU run). In bf16 trainlab keeps torch's fused attention kernel, where the reference writes
it out.

| variant | samples/s | tokens/s | vs reference-style, same precision (median) | range over repeats |
|---|---|---|---|---|
{rows}
"""


def train_run(name: str, overrides: list[str], check: bool = True):
    """``python train.py`` in a subprocess, its run dir under logs/bench_gpu/ made anew:
    (run dir, completed process). tests/ is on the path for its test callbacks."""
    command = [
        sys.executable, "train.py", "task_name=bench_gpu", f"run_name={name}",
        "extras.print_config=false", *overrides,
    ]  # fmt: skip
    run_dir = ROOT / "logs" / "bench_gpu" / "runs" / name
    if run_dir.exists():  # a re-run of the benchmark replaces its own run
        shutil.rmtree(run_dir)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), *sys.path])}
    done = subprocess.run(command, cwd=ROOT, env=env)
    if check and done.returncode:
        # The cause into the benchmark file: the run dir stays on the machine, which a lent
        # GPU machine does not keep (the first compile=true failure there was lost so).
        log = run_dir / "train.log"
        tail = log.read_text().splitlines()[-25:] if log.exists() else ["(no train.log)"]
        raise RuntimeError(
            f"train.py exited {done.returncode}; the end of its train.log:\n\n"
            + "\n".join(f"    {line}" for line in tail)
        )
    return run_dir, done


def logged(run_dir: Path, key: str) -> dict[int, str]:
    """{step: value as written} of one logged key (a step logged twice keeps its last)."""
    return {
        int(row["step"]): row[key]
        for path in run_dir.rglob("metrics.csv")
        for row in csv.DictReader(path.open())
        if row.get(key)
    }


def toy(quick: bool) -> list[str]:
    """At --quick: a toy I-JEPA on whatever device there is, in float32 on a CPU."""
    if not quick:
        return []
    out = [
        "data.image_size=28", "data.train_size=64", "data.batch_size=8", "data.num_workers=0",
        "model.encoder.size=vit_tiny", "model.encoder.depth=1", "model.predictor.depth=1",
        "model.predictor.pred_dim=32", "model.predictor.num_heads=2", "model.masks.min_keep=1",
        "model.masks.num_targets=1", "model.masks.target_scale=[0.25,0.25]", "model.bank_size=64",
    ]  # fmt: skip
    if not torch.cuda.is_available():
        out += ["trainer.accelerator=cpu", "trainer.precision=32-true", "peak_tflops=1.0"]
    return out


IJEPA_SYNTHETIC = [
    "experiment=ijepa", "data=synthetic", "data.global_batch_size=null", "trainer.limit_val_batches=0",
    "test=false", "features.enabled=false",
]  # fmt: skip


def mfu_run(
    quick: bool,
    compiled: bool,
    peak_tflops: float | None,
    steps: int,
    jpeg_root: Path | None = None,
    fsdp_bf16: bool = False,
) -> str:
    """One train.py run of the paper's model; its section: the command, the medians of its
    logged rates over the intervals after the first, the time start-up and compilation add to
    the first interval, and the profile of 5 steady steps (callbacks/step_profile.py).
    ``jpeg_root``: an ImageNet-like JPEG folder read as data=imagenet reads ImageNet, in
    place of data=synthetic. ``fsdp_bf16``: bf16 weights once a step (FSDP2's mixed precision,
    float32 master weights and gradient reduction) in place of bf16 autocast."""
    name = "jpeg_folder" if jpeg_root else f"mfu_h14_{'compile' if compiled else 'eager'}"
    name += "_fsdp_bf16" if fsdp_bf16 else ""
    every = 5 if quick else 20
    data = IJEPA_SYNTHETIC if jpeg_root is None else [
        o for o in IJEPA_SYNTHETIC if o != "data=synthetic"
    ] + [f"data.root={jpeg_root}", "data.num_classes=10"]  # fmt: skip
    overrides = [
        *data, f"compile={str(compiled).lower()}", f"trainer.log_every_n_steps={every}",
        f"trainer.max_steps={steps}", "callbacks=[default,step_profile]",
        f"callbacks.step_profile.start={steps // 2 + 2}",  # clear of the logging steps
    ]  # fmt: skip
    if fsdp_bf16:
        overrides += [*FSDP_BF16, "trainer.precision=32-true"]
    if quick:
        overrides += [o for o in toy(quick) if not (jpeg_root and "train_size" in o)]
    else:
        overrides += ["data.image_size=224", "data.batch_size=128"]
        overrides += [f"data.num_workers={LOADER_WORKERS}"]
        overrides += [] if jpeg_root else ["data.train_size=65536"]
    if peak_tflops:
        overrides.append(f"peak_tflops={peak_tflops}")
    run_dir, _ = train_run(name, overrides)
    keys = ["train/samples_per_s", "train/tokens_per_s", "train/tflops_per_s", "train/mfu"]
    series = {key: logged(run_dir, key) for key in keys}
    med = {
        key: statistics.median(float(v) for _, v in sorted(values.items())[1:])
        for key, values in series.items()
        if len(values) > 1
    }
    command = "    python train.py " + " ".join(overrides)
    label = ("compile=true" if compiled else "eager") + (
        ", FSDP2 bf16 weights" if fsdp_bf16 else ""
    )
    title = f"### {'JPEG folder, ' if jpeg_root else ''}{label}\n\n{command}\n"
    if not med.get("train/mfu"):
        return f"{title}\nNo MFU was logged.\n"
    rates = sorted(series["train/samples_per_s"].items())
    batch = 8 if quick else 128
    # The first interval's seconds beyond as many steady steps: start-up and compilation.
    warm_up = every * batch * (1 / float(rates[0][1]) - 1 / med["train/samples_per_s"])
    RESULTS[name] = {**med, "warm_up_s": warm_up}
    intervals = [f"{float(v):.3f}" for _, v in sorted(series["train/mfu"].items())]
    peak = med["train/tflops_per_s"] / med["train/mfu"]
    metrics = json.loads((run_dir / "metrics.json").read_text())["run"]
    section = f"""{title}
| samples/s | tokens/s | TFLOP/s | MFU (of {peak:.0f} TFLOP/s) | steps after the first interval | peak memory (GiB), measured / estimated |
|---|---|---|---|---|---|
| {med["train/samples_per_s"]:.1f} | {med["train/tokens_per_s"]:,.0f} | {med["train/tflops_per_s"]:.1f} | {med["train/mfu"]:.3f} | {steps - every} | {metrics.get("peak_memory_gib", "-")} / {metrics.get("estimated_peak_gib", "-")} |

MFU per interval of {every} steps: {", ".join(intervals)}. Start-up and compilation: the
first interval took {warm_up:.1f} s more than {every} steady steps.
"""
    preflight = re.search(r"preflight: .* in ([0-9.]+) s", (run_dir / "train.log").read_text())
    if preflight:  # what checking the config whole costs before the run dir
        section += f"\nPreflight (model built on the CPU, one batch of 2): {preflight[1]} s.\n"
    profile = run_dir / "step_profile.json"
    if profile.exists():
        section += profile_section(json.loads(profile.read_text()))
    return section


def jpeg_folder_run(quick: bool, peak_tflops: float | None, steps: int) -> str:
    """An ImageNet-like JPEG folder (about 500 x 375 px, 110 KB each, made by 16 processes)
    through train.py with compile=true, as data=imagenet reads ImageNet, beside the
    data=synthetic run of mfu_compile."""
    from concurrent.futures import ProcessPoolExecutor

    from benchmarks.jpeg_folder import make_folder

    root = ROOT / "logs" / "bench_gpu" / "jpegs"
    shutil.rmtree(root, ignore_errors=True)
    images, chunks = (64, 4) if quick else (2560, 16)
    each = images // chunks
    started = time.perf_counter()
    with ProcessPoolExecutor(chunks) as pool:
        sizes = dict(width=(450, 550), height=(325, 425))
        jobs = [
            pool.submit(make_folder, root, each, i, first=i * each, **sizes) for i in range(chunks)
        ]
        for job in jobs:
            job.result()
    made = time.perf_counter() - started
    size = sum(p.stat().st_size for p in (root / "train").rglob("*.jpg")) / images / 1e3
    section = mfu_run(quick, True, peak_tflops, steps, jpeg_root=root)
    return (
        f"## JPEG folder through the loader ({LOADER_WORKERS} workers)\n\n{images} JPEGs of "
        f"about 500 x 375 px ({size:.0f} KB each) made in {made:.1f} s.\n\n{section}"
    )


def headline_fit(quick: bool) -> str:
    """One GPU of the 8-GPU command's load: experiment=ijepa at a global batch of 256 on one
    device, through train.py: it must not run out of memory, and it says what it chose."""
    batch = ["data.global_batch_size=16", "memory_fit.device_gib=1000"] if quick else [
        "data.global_batch_size=256", "data.image_size=224", "data.train_size=8192",
        f"data.num_workers={LOADER_WORKERS}",
    ]  # fmt: skip
    overrides = [
        *[o for o in IJEPA_SYNTHETIC if not o.startswith("data.global_batch_size")], *batch,
        "trainer.devices=1", "trainer.max_steps=6", "trainer.log_every_n_steps=2",
    ]  # fmt: skip
    if quick:
        overrides += [o for o in toy(quick) if not o.startswith("data.batch_size")]
    run_dir, done = train_run("headline_fit", overrides, check=False)
    log = (run_dir / "train.log").read_text() if (run_dir / "train.log").exists() else ""
    said = re.findall(r"memory: estimated peak .*", log) or ["(no memory line)"]
    metrics = run_dir / "metrics.json"
    peak = (
        json.loads(metrics.read_text())["run"].get("peak_memory_gib", "-")
        if metrics.exists()
        else "-"
    )
    RESULTS["headline_fit"] = {"exit": done.returncode}
    return f"""## One GPU of the 8-GPU command (memory_fit)

    python train.py {" ".join(overrides)}

Exit code {done.returncode}; peak memory measured {peak} GiB. It said:

    {said[0]}
"""


def reference_run(quick: bool) -> str:
    """The reference-style step (benchmarks/step.py: how the official code runs it) in bf16
    on the paper's model and masks: its real TFLOP/s (IJEPA.count_work's FLOPs of the work
    it does), medians of REPEATS."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    encoder_kwargs, predictor, batch = QUICK if quick else FULL
    size = encoder_kwargs["img_size"]
    images = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0))
    labels = torch.zeros(batch, dtype=torch.long)
    make = partial(make_ijepa, encoder_kwargs, predictor, min_keep=10 if size >= 224 else 2)
    runs = [
        step.loop_rate(
            make, images, labels, steps=5 if quick else STEPS, warmup=3 if quick else WARMUP,
            reference=True, bf16=True, device=device,
        )
        for _ in range(1 if quick else REPEATS)
    ]  # fmt: skip
    samples, tokens, tflops = (statistics.median(r[i] for r in runs) for i in range(3))
    RESULTS["reference"] = {"train/samples_per_s": samples, "train/tflops_per_s": tflops}
    return f"""## The reference-style step, bf16 (benchmarks/step.py)

The official code's way of running the step on the same model and masks (attention written
out, the predictor's last block on every row, a loop-over-tensors AdamW, a per-parameter EMA
loop, a host sync per step), under bf16 autocast; medians of {1 if quick else REPEATS} repeats
of {5 if quick else STEPS} timed steps. TFLOP/s counts the work it does (IJEPA.count_work).

| samples/s | tokens/s | TFLOP/s |
|---|---|---|
| {samples:.1f} | {tokens:,.0f} | {tflops:.1f} |
"""


def targets_table() -> str:
    """The parts' numbers against TARGETS, where the parts that give them ran."""
    get = lambda part, key: RESULTS.get(part, {}).get(key)  # noqa: E731
    compiled, eager = RESULTS.get("mfu_h14_compile", {}), RESULTS.get("mfu_h14_eager", {})
    reference = get("reference", "train/tflops_per_s")
    jpeg = get("jpeg_folder", "train/samples_per_s")
    fsdp_bf16 = get("mfu_h14_eager_fsdp_bf16", "train/mfu")
    measured = {
        "MFU, compile=true": compiled.get("train/mfu"),
        "MFU, eager": eager.get("train/mfu"),
        "start-up and compilation beyond steady steps, compile=true (s)": compiled.get("warm_up_s"),
        "real TFLOP/s, compile=true over the reference-style step": (
            compiled["train/tflops_per_s"] / reference if compiled and reference else None
        ),
        "samples/s, JPEG folder over data=synthetic (compile=true)": (
            jpeg / compiled["train/samples_per_s"] if compiled and jpeg else None
        ),
        "MFU, eager: FSDP2 bf16 weights over bf16 autocast": (
            fsdp_bf16 / eager["train/mfu"] if eager and fsdp_bf16 else None
        ),
        "peak memory, measured over the fit decision's estimate (largest of (b))": (
            max(memory) if (memory := get("memory", "ratios")) else None
        ),
        "exit code, one GPU of the 8-GPU command (no out of memory)": get("headline_fit", "exit"),
    }
    rows = []
    for name, (sign, target) in TARGETS.items():
        value = measured[name]
        met = "-" if value is None else (value >= target if sign == ">=" else value <= target)
        shown = "not run" if value is None else f"{value:.3f}"
        rows.append(f"| {name} | {shown} | {sign} {target} | {met} |")
    return "## Against the targets\n\n| number | measured | target | met |\n|---|---|---|---|\n" + (
        "\n".join(rows) + "\n"
    )


def profile_section(report: dict) -> str:
    """The profile's GPU-busy fraction, top kernels and host syncs, as markdown."""
    busy = "-" if report["busy"] is None else f"{report['busy']:.3f}"
    rows = "\n".join(
        f"| {t['name'].replace('|', '/')} | {t['ms_per_step']:.2f} | {t['share']:.3f} |"
        for t in report["top"]
    )
    syncs = "\n".join(f"- {where}: {n}" for where, n in report["syncs"].items()) or "- none"
    return f"""
Profile of {report["steps"]} steady steps ({report["wall_ms_per_step"]:.1f} ms a step):
GPU busy {busy} of the wall time; host syncs per step {report["syncs_per_step"]}, by step
{report["syncs_by_step"]}, by line:
{syncs}

| kernel (or CPU operator) | ms per step | share of the step |
|---|---|---|
{rows}
"""


def memory_table(quick: bool) -> str:
    """(b) Peak memory of full training steps (forward, backward, AdamW, EMA) of
    experiment=ijepa's model in bf16, at 128 and 256 images per GPU, with and without
    activation checkpointing, next to MemoryEstimate's estimate."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from trainlab.memory_fit.estimate import GIB, estimate_peak
    from trainlab.utils.seeding import step_generator

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    batches = (4, 8) if quick else (128, 256)
    rows = []
    for checkpointing in (False, True):
        on_cpu = None  # the fit decision's estimate: counted on the CPU, before the run dir
        for batch in batches:
            with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
                cfg = compose(
                    "train",
                    [
                        *IJEPA_SYNTHETIC,
                        *toy(quick),
                        "data.image_size=" + ("28" if quick else "224"),
                        f"model.encoder.grad_checkpointing={checkpointing}",
                    ],
                )
            model = instantiate(cfg.model)
            size = cfg.data.image_size
            if on_cpu is None:
                on_cpu = estimate_peak(
                    model,
                    lambda n, size=size: torch.randn(n, 3, size, size),
                    batch,
                    lambda: torch.autocast("cpu", dtype=torch.bfloat16),
                )
            decided = on_cpu.at(batch).peak / GIB
            model = model.to(device)
            optimizer = model.configure_optimizers()
            estimate = measured = "-"
            try:
                if cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                estimated = estimate_peak(
                    model,
                    lambda n, size=size: torch.randn(n, 3, size, size, device=device),
                    batch,
                    lambda: torch.autocast(device, dtype=torch.bfloat16, enabled=cuda),
                )
                estimate = f"{estimated.peak / GIB:.2f}"
                if cuda:  # the probes' own peak stays out of the steps'
                    torch.cuda.reset_peak_memory_stats()
                images = torch.randn(batch, 3, size, size, device=device)
                for step in range(3):
                    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
                        loss, _ = model.loss(images, step_generator(0, 0, step))
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    model.update_target(0.996)
                if cuda:
                    peak = torch.cuda.max_memory_allocated() / GIB
                    measured = f"{peak:.2f} ({peak / decided:.2f}x)"
                    ratios = RESULTS.setdefault("memory", {}).setdefault("ratios", [])
                    ratios.append(peak / decided)
            except torch.OutOfMemoryError:
                measured = "out of memory"
            rows.append(f"| {batch} | {checkpointing} | {measured} | {decided:.2f} | {estimate} |")
            del model, optimizer
            if cuda:
                torch.cuda.empty_cache()
    gpu = torch.cuda.get_device_name(0) if cuda else "no GPU: estimates only"
    return f"""## (b) Peak memory, experiment=ijepa's model in bf16 ({gpu})

Three full training steps (forward, backward, AdamW, EMA) per row, in one process;
measured: torch.cuda.max_memory_allocated; estimated: trainlab.memory_fit.estimate, counted
on the CPU as a run decides its fit before its run dir (memory_fit), and on the GPU. The
fit decision keeps memory_fit.margin (0.2: up to 1.25x the estimate) free.

| images per GPU | model.encoder.grad_checkpointing | peak GiB, measured (over the CPU estimate) | peak GiB, estimated on the CPU | on the GPU |
|---|---|---|---|---|
{chr(10).join(rows)}
"""


def resume_check(quick: bool) -> str:
    """(c) bf16-mixed on the device: SIGTERM after step 3, resume; every step's logged
    train/loss must equal an uninterrupted run's, bitwise."""
    job = [
        *IJEPA_SYNTHETIC, "trainer.max_steps=8", "trainer.log_every_n_steps=1",
        "trainer.precision=bf16-mixed", "data.num_workers=2",
    ]  # fmt: skip
    job += toy(quick) if quick else [
        "model.encoder.size=vit_small", "model.encoder.depth=4", "data.image_size=112",
        "data.batch_size=32", "data.train_size=1024",
    ]  # fmt: skip
    job = [o for o in job if o != "trainer.precision=32-true"]  # bf16 here, also on a CPU
    straight, _ = train_run("resume_straight", job)
    stop = ["+callbacks.stop._target_=signal_at_step.SignalAtStep", "+callbacks.stop.step=3"]
    cut, first = train_run("resume_cut", [*job, "resume=true", *stop], check=False)
    _, second = train_run("resume_cut", [*job, "resume=true"], check=False)
    a, b = logged(straight, "train/loss_step"), logged(cut, "train/loss_step")
    equal = a == b and len(a) == 8
    return f"""## (c) bf16-mixed: stop at step 3, resume (through train.py)

    python train.py {" ".join(job)} [resume=true, SignalAtStep at step 3]

Exit codes: stopped {first.returncode} (143 = SIGTERM, as planned), resumed {second.returncode}.
Per-step train/loss equal to the uninterrupted run, bitwise, over 8 steps: **{equal}**
(uninterrupted: {[a[k] for k in sorted(a)]}; resumed: {[b[k] for k in sorted(b)]}).
"""


def fsdp_run(quick: bool) -> str:
    """(d) FSDP2 (strategy=fsdp) on one rank: 20 steps of experiment=ijepa's model."""
    overrides = [
        *IJEPA_SYNTHETIC, "strategy=fsdp", "trainer.devices=1", "trainer.max_steps=20",
        "trainer.log_every_n_steps=5",
    ]  # fmt: skip
    overrides += toy(quick) if quick else [
        "data.image_size=224", "data.batch_size=64", "data.train_size=4096", "data.num_workers=14",
    ]  # fmt: skip
    run_dir, done = train_run("fsdp_h14", overrides, check=False)
    losses = logged(run_dir, "train/loss_step")
    rates = logged(run_dir, "train/samples_per_s")
    return f"""## (d) FSDP2 on one rank, 20 steps

    python train.py {" ".join(overrides)}

Exit code {done.returncode}; train/loss at steps {sorted(losses)}: {list(losses.values())};
samples/s per interval: {list(rates.values())}.
"""


def gloo_powersgd(quick: bool) -> str:
    """(e) 2 processes on one device over gloo, DDP with trainlab's PowerSGD hook: DDP's
    CUDA-tensor path for gradients and hooks (NCCL refuses two ranks on one GPU)."""
    out = ROOT / "logs" / "bench_gpu" / "gloo_powersgd.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.multiprocessing.spawn(gloo_rank, args=(str(out), free_port()), nprocs=2, join=True)
    report = json.loads(out.read_text())
    return f"""## (e) 2 ranks on one {report["device"]} over gloo, PowerSGD (DDP, plain torch)

A 4-layer MLP (bucket_cap_mb=1: several buckets), PowerSGD rank 1 from step 2, 12 SGD steps.
Weights equal on both ranks after training: **{report["equal"]}**; loss {report["first"]:.4f}
-> {report["last"]:.4f}; PowerSGD iterations {report["iter"]}, compression {report["rate"]:.1f}x.

SyncBatchNorm (trainer.sync_batchnorm=true on VICReg's expander, half a batch a rank), the
running statistics' largest difference: {sync_bn_text(report["sync_bn"])}.
"""


def sync_bn_text(result: dict | None) -> str:
    if result is None:
        return "not run (torch's SyncBatchNorm runs on GPUs only)"
    return (
        f"{result['between_ranks']:.2e} between the ranks, {result['against_whole_batch']:.2e} "
        "against one BatchNorm over the whole batch"
    )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gloo_rank(rank: int, out: str, port: int) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from trainlab.strategy.comm_hooks import CommStats, build_comm_hook

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(0)
    layers = [torch.nn.Linear(256, 256) for _ in range(4)]
    net = torch.nn.Sequential(*layers).to(device)
    ddp = DistributedDataParallel(
        net, device_ids=[0] if device.type == "cuda" else None, bucket_cap_mb=1
    )
    stats = CommStats()
    powersgd = {"start_powerSGD_iter": 2, "matrix_approximation_rank": 1}
    state, hook = build_comm_hook("powersgd", None, powersgd, stats, one_bucket_at_a_time=True)
    ddp.register_comm_hook(state, hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.3)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 256, generator=g).to(device)
    losses, dense, sent = [], 0, 0
    for _ in range(12):
        loss = (ddp(x) - x).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        d, s = stats.take()
        dense, sent = dense + d, sent + s
    flat = torch.cat([p.detach().flatten() for p in net.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(2)]
    dist.all_gather(gathered, flat)
    sync_bn = sync_batchnorm_check(rank, device) if device.type == "cuda" else None
    if rank == 0:
        Path(out).write_text(json.dumps({
            "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU",
            "equal": bool(torch.equal(gathered[0], gathered[1])), "first": losses[0],
            "last": losses[-1], "iter": state.iter, "rate": dense / max(sent, 1),
            "sync_bn": sync_bn,
        }))  # fmt: skip
    dist.destroy_process_group()


def sync_batchnorm_check(rank: int, device: torch.device) -> dict:
    """trainer.sync_batchnorm=true (Lightning's TorchSyncBatchNorm: convert_sync_batchnorm) on
    VICReg's expander, each rank holding half of one batch: the largest difference of the
    BatchNorm's running statistics between the ranks, and against one BatchNorm that sees the
    whole batch. torch's SyncBatchNorm refuses CPU tensors, so this runs on GPUs only."""
    import torch.distributed as dist

    from trainlab.networks.vicreg import Expander

    torch.manual_seed(0)
    expander = Expander(32, width=64, depth=2).to(device)
    whole = torch.randn(16, 32, generator=torch.Generator().manual_seed(5)).to(device)
    synced = torch.nn.SyncBatchNorm.convert_sync_batchnorm(expander).to(device)
    synced.train()(whole[rank * 8 : (rank + 1) * 8])
    stats = torch.cat([synced[1].running_mean, synced[1].running_var])
    torch.manual_seed(0)
    reference = Expander(32, width=64, depth=2).to(device).train()
    reference(whole)
    expected = torch.cat([reference[1].running_mean, reference[1].running_var])
    gathered = [torch.empty_like(stats) for _ in range(2)]
    dist.all_gather(gathered, stats)
    return {
        "between_ranks": (gathered[0] - gathered[1]).abs().max().item(),
        "against_whole_batch": (stats - expected).abs().max().item(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy sizes: check that it runs")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the GPU's dense bf16 peak, where neither trainlab nor "
                        "Lightning knows it")  # fmt: skip
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "gpu.md"))
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS),
                        help="which measurements to run, in this order")  # fmt: skip
    parser.add_argument("--steps", type=int, default=220, help="optimizer steps of each MFU run")
    parser.add_argument("--no-compiled-steps", action="store_true",
                        help="leave the compiled rows out of the step table (about a minute "
                        "of compiling each)")  # fmt: skip
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.quick:
        sys.exit("error: no CUDA GPU here: run scripts/gpu_check.sh on a GPU machine (or --quick)")
    steps = 20 if args.quick else args.steps
    sections = [
        f"""# GPU benchmarks

Written by benchmarks/gpu.py (`scripts/gpu_check.sh` runs it in one call) on
{datetime.date.today()}{" (--quick: toy sizes)" if args.quick else ""}, parts {", ".join(args.parts)}.
Machine: {machine()}.

## (a) MFU at ViT-H/14, bf16 (through train.py)

The paper's encoder (ViT-H/14 at 224 px, predictor 12 x 384, 4 targets, the paper's masks)
in bf16-mixed on data=synthetic (uint8 images, no decode: the loader cannot bound it),
batch 128, rates logged every 20 steps by trainlab.callbacks.throughput: medians
over the logged intervals after the first, which holds start-up and compilation. FLOPs
are IJEPA.count_work's (the target encoder's forward, the context encoder's forward and
backward, the predictor's), MFU against the GPU's dense bf16 peak.
"""
    ]
    # Each part is written as soon as it ends: a run cut short keeps what it measured.
    parts = {
        "mfu_eager": partial(mfu_run, args.quick, False, args.peak_tflops, steps),
        "mfu_compile": partial(mfu_run, args.quick, True, args.peak_tflops, steps),
        "reference": partial(reference_run, args.quick),
        "jpeg_folder": partial(jpeg_folder_run, args.quick, args.peak_tflops, steps * 2 // 3),
        "headline_fit": partial(headline_fit, args.quick),
        "mfu_fsdp_bf16": partial(
            mfu_run, args.quick, False, args.peak_tflops, steps * 2 // 3, fsdp_bf16=True
        ),
        "memory": partial(memory_table, args.quick),
        "resume": partial(resume_check, args.quick),
        "fsdp": partial(fsdp_run, args.quick),
        "gloo_powersgd": partial(gloo_powersgd, args.quick),
        "steps": partial(step_table, args.quick, device, not args.no_compiled_steps),
    }
    failed = 0
    for name in args.parts:
        started = time.perf_counter()
        try:
            sections.append(parts[name]())
        except Exception as error:  # the other parts still run; the exit status says so
            traceback.print_exc()
            sections.append(f"### {name}\n\nFailed: {type(error).__name__}: {error}\n")
            failed += 1
        sections[-1] += f"\n({name}: {time.perf_counter() - started:.0f} s)\n"
        print(sections[-1], flush=True)
        # The closing table of what has run so far: a run cut short keeps it too.
        Path(args.out).write_text("\n".join([*sections, targets_table()]))
    print(targets_table(), flush=True)
    print(f"wrote {args.out}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
