"""fit.json: what a finished fit leaves for the steps after it (the test, the end-of-run table,
the summary). A run stopped in either of those resumes with nothing left to fit, so its own
fit logs no metric and times nothing; the summary then reads the recorded fit's.

Written by rank 0 once the fit ends, atomically; removed when a run starts its fit afresh (a
resume that found no checkpoint), so a record is always of the fit the checkpoints hold."""

import json
import os
from pathlib import Path

import lightning as L

RECORD = "fit.json"


def facts(trainer: L.Trainer) -> dict:
    """Every callback's ``summary()`` (the fit's time and rates, bytes sent, peak memory)."""
    out = {}
    for callback in trainer.callbacks:
        if callable(getattr(callback, "summary", None)):
            out |= callback.summary()
    return out


def forget_fit(run_dir: Path) -> None:
    """A fit that starts from step 0: any record is of an attempt it replaces."""
    (run_dir / RECORD).unlink(missing_ok=True)


def keep_fit(run_dir: Path, trainer: L.Trainer, metrics: dict) -> tuple[dict, dict]:
    """(metrics, facts) of the fit that just ended: this process's, recorded; or, when a
    record is there (the fit had ended before this resume, which fitted nothing), the
    recorded ones, with this process's metrics over them."""
    path = run_dir / RECORD
    if path.is_file():
        kept = json.loads(path.read_text())
        return {**kept["metrics"], **metrics}, kept["facts"]
    fit = {"metrics": metrics, "facts": facts(trainer)}
    if trainer.is_global_zero:
        partial = path.with_name(f".{RECORD}.partial")
        partial.write_text(json.dumps(fit, indent=2, default=str) + "\n")
        os.replace(partial, path)
    return fit["metrics"], fit["facts"]
