#!/usr/bin/env bash
# Everything issue 41 asks of a GPU, in one call of at most 9 minutes; writes BENCHMARKS_GPU.md
# (each part as soon as it ends, so a run cut short keeps what it measured):
#   (a) MFU eager and compiled, ViT-H/14 bf16 through train.py, 220 steps each, with a profile
#       of 5 steady steps (GPU-busy fraction, top kernels, host syncs by line);
#   (b) peak memory at 128 and 256 per GPU, with and without activation checkpointing;
#   (c) bf16-mixed on CUDA: SIGTERM at step 3, resume, losses equal to an uninterrupted run;
#   (d) FSDP2 on one rank, 20 steps of ViT-H;
#   (e) 2 processes on the one GPU over gloo with the PowerSGD hook, and SyncBatchNorm's
#       statistics on both ranks (trainer.sync_batchnorm=true).
#
#   scripts/gpu_check.sh                      # on a CUDA machine
#   scripts/gpu_check.sh --quick              # toy sizes on any machine (tests/test_gpu_check.py)
#   scripts/gpu_check.sh --parts memory fsdp  # some parts (scripts/bench_gpu.py --help)
#
# Needs trainlab's dependencies importable (make install, or PYTHONPATH on a machine whose
# Python already has torch and Lightning); the compiled run goes last, as the longest.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec timeout --signal=INT 540 "$PY" scripts/bench_gpu.py \
  --parts mfu_eager memory resume fsdp gloo_powersgd mfu_compile "$@"
