"""Refusal times: seconds from ``python train.py <a bad value>`` to its one-line error,
with and without an experiment, and whether torch was imported on the way: the command
line's types, the ranges by key and the run dir refuse before it; a value against its
class's signature after it (importing it alone takes seconds)."""

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Runs train.py as `python train.py ...` does, then says on exit whether torch was imported.
PROBE = (
    "import atexit, runpy, sys\n"
    "atexit.register(lambda: print('torch imported:', 'torch' in sys.modules, file=sys.stderr))\n"
    "sys.argv = ['train.py', *sys.argv[1:]]\n"
    "runpy.run_path('train.py', run_name='__main__')\n"
)
BAD = {  # what is refused: the overrides
    "a signature's choice (model.ema_shape=bogus)": ["model.ema_shape=bogus"],
    "a signature's range (model.masks.fixed_shapes=0)": ["model.masks.fixed_shapes=0"],
    "a type (trainer.max_epochs=ten)": ["trainer.max_epochs=ten"],
    "a learning rate (model.optimizer.lr=-1)": ["model.optimizer.lr=-1"],
    "a run name (run_name=../x)": ["run_name=../x"],
    "a finished run's dir (run_name=done)": ["run_name=done"],
}
EXPERIMENTS = [[], ["experiment=ijepa_mnist"]]


def refusal(args: list[str], logs: str) -> tuple[float, str, bool]:
    """(seconds, the error line, whether torch was imported)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args, f"paths.log_dir={logs}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    return seconds, lines[0], lines[-1] == "torch imported: True"


def import_seconds(repeats: int = 5) -> float:
    """Median seconds of importing torch and Lightning alone: what a refusal used to wait for."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch, lightning"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench(repeats: int = 5) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as logs:
        done = Path(logs) / "train" / "runs" / "done"  # a finished run, as its files say
        (done / "checkpoints").mkdir(parents=True)
        (done / "meta.json").write_text("{}\n")
        (done / "metrics.json").write_text('{"metrics": {}}\n')
        for what, overrides in BAD.items():
            for experiment in EXPERIMENTS:
                runs = [refusal([*experiment, *overrides], logs) for _ in range(repeats)]
                rows.append(
                    {
                        "what": what,
                        "experiment": experiment[0] if experiment else "-",
                        "median_s": statistics.median(r[0] for r in runs),
                        "torch": any(r[2] for r in runs),
                        "line": runs[0][1],
                    }
                )
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| refused | experiment | seconds (median of 5) | torch imported |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['what']} | {r['experiment']} | {r['median_s']:.2f} | {'yes' if r['torch'] else 'no'} |"
        for r in rows
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(bench()))
    print(f"\nimporting torch and Lightning alone: {import_seconds():.2f} s (median of 5)")
