"""The machine in words, for results files and the recorded trace: the CPU's model and bf16
instructions, cores, GPU, Python, torch and threads."""

import os
import platform
from pathlib import Path


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    flags = next((line for line in lines if line.startswith("flags")), "flags:")
    return set(flags.split(":", 1)[1].split())


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform knows; with "AMX bf16" or
    "AVX-512 bf16" where the CPU has bf16 instructions (bf16 then runs faster than float32,
    without them far slower)."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    flags = cpu_flags()
    name = names[0] if names else platform.processor() or platform.machine()
    if "amx_bf16" in flags:
        return f"{name} with AMX bf16"
    return f"{name} with AVX-512 bf16" if "avx512_bf16" in flags else name


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (a SLURM job's or a container's
    share), as torch's DataLoader counts them; the machine's count where there is none."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def machine() -> str:
    """The results files' machine line: CPU, cores, GPU, Python, torch, threads."""
    import torch  # here, not at the top: cpu_flags is read while a config is composed

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, {gpu}; Python {platform.python_version()}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
