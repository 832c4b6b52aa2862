"""The I-JEPA part's benchmarks: its masks, its training step beside the reference code's way,
where the step's time goes, activation checkpointing's memory, and the loader it needs.
`python -m benchmarks.ijepa` runs them and writes benchmarks/ijepa.md.

Each benchmark compares two implementations in the same process and run (ratios, medians
over repeats), since this machine is shared and absolute numbers drift.
"""

import datetime
from functools import partial
from pathlib import Path

import torch

from benchmarks import collation, masks, memory, model, step, step_profile
from trainlab.utils.machine import machine

ROOT = Path(__file__).resolve().parents[1]
# The benchmark model: ijepa_digits' I-JEPA (ViT-Tiny/4, depth 4) at 32 px: 64 tokens.
SHAPE = dict(img_size=32, patch_size=4, in_chans=1, size="vit_tiny", depth=4)
BATCH = 64
# The step table's repeats: 3 left bf16 rows 20 % apart between two runs an hour apart here.
STEP_REPEATS = 5


# grad_checkpointing stays a keyword: memory.bench builds it both ways.
make_ijepa = partial(model.make_ijepa, SHAPE)


def make_batch():
    g = torch.Generator().manual_seed(0)
    return torch.randn(BATCH, 1, 32, 32, generator=g), torch.randint(0, 10, (BATCH,), generator=g)


def main():
    mask_times = masks.bench()
    images, labels = make_batch()
    step_times = step.bench(make_ijepa, images, labels, repeats=STEP_REPEATS)
    step_rows = "\n".join(
        f"| {name} | {rate:.1f} | {'-' if tokens is None else f'{tokens:,.0f}'} "
        f"| {ratio:.2f}x | {low:.2f}-{high:.2f}x |"
        for name, (rate, tokens, (ratio, low, high)) in step_times.items()
    )
    profiles = step_profile.bench(make_ijepa, images, labels)
    memory_use = memory.bench(make_ijepa, images)
    collation_rates = collation.bench()
    text = f"""# I-JEPA's benchmarks

Measured on {datetime.date.today()} by the benchmarks benchmarks/ijepa.py runs (`python -m benchmarks.ijepa` writes this file).
Machine: {machine()}.
Ratios compare two implementations measured side by side in one run; medians over repeats.

## Mask generation (benchmarks/masks.py)

Batch {mask_times["batch"]}, {mask_times["grid"]} grid, paper settings (4 targets, min_keep 4).

| implementation | ms per batch |
|---|---|
| per-sample loop of the reference algorithm | {mask_times["loop_ms"]:.2f} |
| trainlab's vectorised generator | {mask_times["vectorised_ms"]:.2f} |
| **speed-up** | **{mask_times["speedup"]:.1f}x** |

## I-JEPA training step: the reference's way, trainlab's, and what speeds it up (benchmarks/step.py)

ijepa_digits' model (ViT-Tiny/4 depth 4, predictor 2 x 96) at 32 px, batch {BATCH} gray
images, the same batch and the same masks every step in every variant (so the same token
counts), AdamW, schedules, online probe and EMA in all. The reference-style loop is a
reimplementation of how the official I-JEPA code runs its step (softmax attention written
out, the predictor's last block on every row, an EMA loop over parameters, the loss read on
the host every step), not its code. trainlab runs the predictor's last block on the target
rows alone (their outputs are all the loss reads): the same predictions for fewer FLOPs.
Medians of {STEP_REPEATS} repeats of 15 timed steps (this machine is shared and drifts by
10 % or more between runs); tokens are those IJEPA.count_work counts. The speed-up is paired:
in each repeat, a row's samples/s over its reference-style row's from the same repeat; the
median of those, and their range over the repeats.

| variant | samples/s | tokens/s | vs reference-style, same precision (median) | range over repeats |
|---|---|---|---|---|
{step_rows}

The bf16 rows run the step under CPU autocast. torch's fused (flash) attention has a slow
bf16 backward on CPUs, so a bf16 run on a CPU writes attention out as the reference does
(callbacks/cpu_bf16_attention.py); the "before" row keeps the fused kernel. bf16 is fast only
where the CPU has bf16 instructions (the machine line says "AMX bf16" or "AVX-512 bf16" where
it does); without them it runs far slower than float32.

## Where the step's time goes (benchmarks/step_profile.py)

trainlab's eager step above (bare loop), 10 steps under torch.profiler, and the FLOPs of
those 10 steps' matrix products (linear layers and attention, forward and backward). Everything
else (norms, activations, casts, copies, AdamW, EMA, Python between ops, and the patch
embedding's convolution, under 1 %) is what cutting overhead can remove. The last column is
the bound that follows: the step's speed if all of it were gone and the products ran as
they do now. Beyond it a step must run fewer products or faster ones.

{step_profile.table(profiles)}

## Activation checkpointing: peak memory (benchmarks/memory.py)

Same model and batch, one training step on {memory_use["device"]}: {memory_use["what"]}.

| setting | MiB |
|---|---|
| no checkpointing | {memory_use["plain_mib"]:.0f} |
| `model.encoder.grad_checkpointing=true` | {memory_use["checkpointed_mib"]:.0f} |
| **checkpointed / plain** | **{memory_use["ratio"]:.2f}** |

## Collation: uint8 training batches vs float32, at ViT-Small/224 (benchmarks/collation.py)

{collation_rates["images"]} JPEGs (benchmarks/jpeg_folder.py: 320-480 px, about 75 KB each) through data=imagefolder's training loader, 224 px random-resized
crops, batch {collation_rates["batch"]}, {collation_rates["workers"]} workers, one epoch per measurement, normalisation included
(in the workers for float32; after the batch leaves the loader for uint8, where Lightning's
`on_after_batch_transfer` does it in a run). Then trainlab's eager I-JEPA step at
ViT-Small/16, 224 px (batch 8) on the same machine: the rate the loader has to keep up with.

{collation.table(collation_rates)}
"""
    (ROOT / "benchmarks" / "ijepa.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
