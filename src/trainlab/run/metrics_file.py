"""metrics.json: the one file that scripts, sweeps and users read a run's results from."""

import json
import math
import os
from pathlib import Path

from lightning import Trainer

from trainlab.utils.console import print_summary
from trainlab.utils.errors import StorageError


def final_metrics(trainer: Trainer) -> dict[str, float]:
    """The last value of every metric the run logged, as plain floats."""
    metrics = {}
    for key, value in trainer.callback_metrics.items():
        value = float(value)
        metrics[key] = value if math.isfinite(value) else str(value)
    return metrics


def batch_facts(trainer: Trainer, batch_size: int) -> dict[str, int]:
    world = trainer.world_size
    accumulate = trainer.accumulate_grad_batches
    return {
        "world_size": world,
        "num_nodes": trainer.num_nodes,
        "batch_size_per_device": batch_size,
        "accumulate_grad_batches": accumulate,
        "global_batch_size": batch_size * world * accumulate,
    }


def write_metrics_json(run_dir: Path, **sections) -> Path:
    """The run's last word, atomically: written beside, then renamed over. A write that fails
    (a full disk) leaves no metrics.json, so the run is not taken for finished and
    ``resume=true`` continues it from its last checkpoint."""
    path = run_dir / "metrics.json"
    partial = path.with_name(".metrics.json.partial")
    try:
        partial.write_text(json.dumps(sections, indent=2, default=str) + "\n")
        os.replace(partial, path)
    except OSError as e:
        partial.unlink(missing_ok=True)
        raise StorageError(
            f"cannot write {path}: {e.strerror}; the run is not marked finished: free space "
            "there and continue it with resume=true (its checkpoints are unchanged)"
        ) from e
    return path


def report(
    title: str, run_dir: Path, metrics: dict, head: dict, tail: dict | None = None, **sections
) -> Path:
    """Write metrics.json and print the run's summary: ``head`` rows, where metrics.json is,
    every final metric, then ``tail`` rows. Not printed: per-step values, one that ``run``
    holds for the whole fit (train_samples_per_s for train/samples_per_s), and
    LearningRateMonitor's ``lr-*`` (each optimizer group's last rate: a setting, and
    train/lr where the method schedules it)."""
    path = write_metrics_json(run_dir, metrics=metrics, **sections)
    fit = {k.replace("_", "/", 1) for k in sections.get("run", {})}  # train_samples_per_s
    final = {
        k: v
        for k, v in sorted(metrics.items())
        if not k.endswith("_step") and not k.startswith("lr-") and k not in fit
    }
    print_summary(title, {**head, "metrics.json": path, **final, **(tail or {})})
    return path
