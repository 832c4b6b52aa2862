"""`make bench`: run the core's benchmarks and write benchmarks/README.md. A part's benchmark
is run on its own and writes its own file (its page in docs/parts/ gives the command):
I-JEPA's masks, step, profile, activation memory and collation are benchmarks/ijepa.py's.

Each benchmark compares two implementations in the same process and run (ratios, medians
over repeats), since this machine is shared and absolute numbers drift.
"""

import datetime
from pathlib import Path

from benchmarks import loader, optimizer, rating, rating_scale, refusals, startup
from trainlab.utils.machine import machine

ROOT = Path(__file__).resolve().parents[1]
RATING_TEXT = """The linear grid whitens each view's training features. With fewer images than dimensions
(the pixel view of photos) it reads the directions from the N x N Gram matrix rather than
the D x D covariance: the same directions (tests/test_evaluation.py). Seconds, median of
3, for one view; the grid whitens each of its 4 views once per rated encoder."""

SCALE_TEXT = """One extractor's rating as the end-of-run table runs it for each row (its features as they
are and standardised, five weight decays of L-BFGS each, kNN), on synthetic features of 10
classes; val and test a tenth of train. Each shape in a fresh process."""


def main():
    startup_times = startup.bench()
    refusal_rows, torch_import_s = refusals.bench(), refusals.import_seconds()
    loader_rates = loader.bench()
    optimizer_times = optimizer.bench()
    rating_rows = rating.bench()
    scale_rows = rating_scale.bench()
    text = f"""# Benchmarks

Written by `make bench` (benchmarks/__main__.py) on {datetime.date.today()}.
Machine: {machine()}.
Ratios compare two implementations measured side by side in one run; medians over repeats.

## Start-up (benchmarks/startup.py)

`python train.py` with one optimizer step of the default job, no validation, no test
(median of 3 runs): {startup_times["one_step_run_s"]:.1f} s, of which {startup_times["import_s"]:.1f} s is importing
trainlab's training code (torch, Lightning, Hydra, timm) and {startup_times["rest_s"]:.1f} s composing the
config, building the data, model and Trainer, the step and writing the run dir.

## Refusals (benchmarks/refusals.py)

`python train.py <one bad value>` until its one-line error (exit 2), with and without an
experiment: seconds, median of 5, and whether torch was imported on the way. The command
line's types (beside Lightning's nodes and trainlab's class arguments), the ranges by key
and the run dir refuse before torch; a value against its class's signature (trainlab's
arguments, the Trainer's) after the import, still before the run dir. Importing torch and
Lightning alone takes {torch_import_s:.2f} s here (median of 5).

{refusals.table(refusal_rows)}

## AdamW: torch's default (foreach) against the fused kernel (benchmarks/optimizer.py)

{optimizer.markdown(optimizer_times)}
## The training loader alone, by data set and workers (benchmarks/loader.py)

{loader.markdown(loader_rates, 480.0)}
## The frozen-feature rating's whitening on wide views (benchmarks/rating.py)

{RATING_TEXT}

{rating.table(rating_rows)}

## The frozen-feature rating against images and width (benchmarks/rating_scale.py)

{SCALE_TEXT}

{rating_scale.table(scale_rows)}

## On a GPU: benchmarks/gpu.md (`scripts/gpu_check.sh`)

This machine has no GPU. On one, `scripts/gpu_check.sh` (benchmarks/gpu.py) runs the paper's
encoder (ViT-H/14 at 224 px, predictor 12 x 384) in bf16-mixed through `python train.py`,
eager and with `compile=true`, on FakeData so that loading is not what is timed, and reads
`train/samples_per_s`, `train/tokens_per_s`, `train/tflops_per_s` and `train/mfu` from the
run's logged intervals after the first (start-up and compilation). MFU is per device,
against the GPU's dense bf16 peak (Lightning's table, corrected for the H200 in
the throughput part, docs/parts/throughput.md; `peak_tflops=<TFLOP/s>` for a GPU neither knows). It then
runs I-JEPA's step table (benchmarks/ijepa.md) on the GPU at ViT-B/16, 224 px, batch 64. The file says which
GPU and torch wrote it.
"""
    (ROOT / "benchmarks" / "README.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
