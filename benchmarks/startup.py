"""Start-up: seconds from ``python train.py`` to the end of a one-step run of the default job,
and how much of it is importing trainlab's training code (Lightning, Hydra, timm, torch)."""

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONE_STEP = [
    "trainer.max_steps=1",
    "trainer.limit_val_batches=0",
    "test=false",
    "features.enabled=false",
    "extras.print_config=false",
]


def seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start


def bench(repeats: int = 3) -> dict:
    """Medians of ``repeats``: the one-step run, the import alone, and the run without it."""
    runs, imports = [], []
    with tempfile.TemporaryDirectory() as logs:
        for i in range(repeats):
            train = [
                sys.executable,
                "train.py",
                *ONE_STEP,
                f"paths.log_dir={logs}",
                f"run_name={i}",
            ]
            runs.append(seconds(train))
            imports.append(seconds([sys.executable, "-c", "import trainlab.commands"]))
    run, imported = statistics.median(runs), statistics.median(imports)
    return {"one_step_run_s": run, "import_s": imported, "rest_s": run - imported}


if __name__ == "__main__":
    print(bench())
