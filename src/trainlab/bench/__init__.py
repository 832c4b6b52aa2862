"""Benchmarks behind `make bench` (scripts/bench.py writes BENCHMARKS.md): each module
compares two implementations side by side in one run and returns medians over repeats.
Each also runs alone: ``python -m trainlab.bench.<name>``."""

import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform knows; with "AMX bf16" where the
    CPU has bf16 matrix units (bf16 then runs far faster than float32, without them slower)."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    amx = any(line.startswith("flags") and " amx_bf16" in line for line in lines)
    name = names[0] if names else platform.processor() or platform.machine()
    return f"{name} with AMX bf16" if amx else name
