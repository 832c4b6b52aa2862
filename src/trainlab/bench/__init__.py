"""Benchmarks behind `make bench` (scripts/bench.py writes BENCHMARKS.md): each module
compares two implementations side by side in one run and returns medians over repeats.
Each also runs alone: ``python -m trainlab.bench.<name>``."""

import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform knows."""
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()
