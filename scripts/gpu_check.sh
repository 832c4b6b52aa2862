#!/usr/bin/env bash
# What needs a GPU, in one call of at most 8 minutes; writes benchmarks/gpu.md
# (each part as soon as it ends, so a run cut short keeps what it measured):
#   (a) MFU, ViT-H/14 bf16 through train.py with the paper's masks on data=synthetic, eager
#       and compile=true, each with its start-up time and a profile of 5 steady steps
#       (GPU-busy fraction, top kernels, host syncs by line);
#   the reference-style step (how the official code runs it) on the same model and masks,
#       for the ratio of real TFLOP/s;
#   compile=true on an ImageNet-like JPEG folder (2,560 JPEGs of about 500 x 375, 14 loader
#       workers) beside data=synthetic;
#   (b) peak memory at 128 and 256 per GPU, with and without activation checkpointing,
#       measured and estimated;
#   one GPU of the 8-GPU command (a global batch of 256 on one device): what memory_fit
#       chose, and no out of memory;
#   (a) eager again with bf16 weights once a step (FSDP2's mixed precision) in place of bf16
#       autocast;
#   a closing table of the numbers against their targets, rewritten after every part.
# The earlier checks stay one flag away: --parts resume fsdp gloo_powersgd steps.
#
#   scripts/gpu_check.sh                      # on a CUDA machine
#   scripts/gpu_check.sh --quick              # toy sizes on any machine (tests/test_gpu_check.py)
#   scripts/gpu_check.sh --parts memory fsdp  # some parts (python -m benchmarks.gpu --help)
#
# Needs trainlab's dependencies importable (make install, or PYTHONPATH on a machine whose
# Python already has torch and Lightning). Not yet timed on a GPU in this form: the eager
# part took 153 s on an H100 before, with whole networks compiled compile=true did not reach
# its first logged interval in 290 s; compiling one block per network is meant to take
# seconds (docs/scaling.md).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec timeout --signal=INT 480 "$PY" -m benchmarks.gpu \
  --parts mfu_eager mfu_compile reference jpeg_folder memory headline_fit mfu_fsdp_bf16 \
  --steps 120 "$@"
