#!/usr/bin/env bash
# What needs a GPU, in one call of at most 8 minutes; writes benchmarks/gpu.md
# (each part as soon as it ends, so a run cut short keeps what it measured), new defaults first:
#   (a) MFU eager, ViT-H/14 bf16 through train.py on data=synthetic, with a profile of 5
#       steady steps (GPU-busy fraction, top kernels, host syncs by line);
#   the ViT-H/14 step table in bf16: the reference-style loop, trainlab's bare loop,
#       torch's default AdamW, on the same fixed-shape masks (eager: the compiled
#       step is measured through train.py, below);
#   (b) peak memory at 128 and 256 per GPU, with and without activation checkpointing;
#   (a) again with compile=true (last: the longest).
# The earlier checks stay one flag away: --parts resume fsdp gloo_powersgd.
#
#   scripts/gpu_check.sh                      # on a CUDA machine
#   scripts/gpu_check.sh --quick              # toy sizes on any machine (tests/test_gpu_check.py)
#   scripts/gpu_check.sh --parts memory fsdp  # some parts (python -m benchmarks.gpu --help)
#
# Needs trainlab's dependencies importable (make install, or PYTHONPATH on a machine whose
# Python already has torch and Lightning). Timed on an H100 (2026-11-27): the eager part 153 s;
# the step table, float32 rows then included, did not end in 330 s (bf16 rows alone since);
# compile=true did not reach its first logged interval in 290 s, 2 minutes of it the memory
# estimate's probe being traced (eager since). So the 8 minutes still hold no compiled number.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec timeout --signal=INT 480 "$PY" -m benchmarks.gpu \
  --parts mfu_eager steps memory mfu_compile --steps 120 --no-compiled-steps "$@"
