"""scripts/gpu_check.sh composes and runs at toy sizes on a CPU, so that no GPU time is spent
on a script that fails for reasons a CPU would have shown."""

import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT


@pytest.mark.slow  # 107 s: make test-oldest, on the GPU machine's stack (test-slow skips it)
def test_the_gpu_check_runs_every_part_at_toy_sizes(tmp_path):
    out = tmp_path / "gpu.md"
    result = subprocess.run(
        [str(ROOT / "scripts" / "gpu_check.sh"), "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHON": sys.executable},  # this stack's, not .venv's when both exist
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = out.read_text()
    assert "Failed" not in text
    assert f"torch {torch.__version__}," in text  # it ran on the stack under test
    for heading in (
        "### eager", "### compile=true", "## The reference-style step", "## (b)",
        "### JPEG folder, compile=true", "### eager, FSDP2 bf16 weights", "## One GPU of the 8-GPU command",
        "## Against the targets",
    ):  # fmt: skip
        assert heading in text, heading
    unmeasured = [line for line in text.splitlines() if "| not run |" in line]
    assert all("peak memory" in line for line in unmeasured), unmeasured  # no CUDA peak here
    assert "memory: estimated peak" in text  # the headline command said what it chose
    assert "| kernel (or CPU operator) |" in text  # (a)'s profile
