"""metrics.json: the one file that scripts, sweeps and users read a run's results from."""

import json
import math
from pathlib import Path

from lightning import Trainer

from trainlab.run.console import print_summary


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
    path = run_dir / "metrics.json"
    path.write_text(json.dumps(sections, indent=2, default=str) + "\n")
    return path


def report(
    title: str, run_dir: Path, metrics: dict, head: dict, tail: dict | None = None, **sections
) -> Path:
    """Write metrics.json and print the run's summary: ``head`` rows, where metrics.json is,
    every final metric (per-step values left out), then ``tail`` rows."""
    path = write_metrics_json(run_dir, metrics=metrics, **sections)
    final = {k: v for k, v in sorted(metrics.items()) if not k.endswith("_step")}
    print_summary(title, {**head, "metrics.json": path, **final, **(tail or {})})
    return path
