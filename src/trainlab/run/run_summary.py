"""Rank 0's run summary: the console table and metrics.json."""

import shlex
from pathlib import Path

import lightning as L
from omegaconf import DictConfig

from trainlab.run.fit import pruned_epoch
from trainlab.run.metrics_file import report

# Callbacks' summary() numbers shown in the run summary, where the callback is there
SPEED_ROWS = {
    "train_samples_per_s": "train samples/s",
    "train_tokens_per_s": "train tokens/s",
    "train_tflops_per_s": "train TFLOP/s",
    "train_mfu": "MFU",
    "estimated_peak_gib": "peak memory, estimated (GiB)",
    "peak_memory_gib": "peak memory, measured (GiB)",
}
# ... and those counted in bytes, shown in MiB
BYTE_ROWS = {
    "comm_bytes_per_step": "gradients sent/step, per rank (MiB)",
    "other_comm_bytes_per_step": "other data sent/step, per rank (MiB)",
}


def report_run(
    cfg: DictConfig, trainer: L.Trainer, run_dir: Path, metrics: dict, best: str, run: dict, chosen
) -> None:
    """Rank 0's run summary (console table and metrics.json); a pruned trial's says after
    which epoch, where its sweeper reads it."""
    last = run_dir / "checkpoints" / "last.ckpt"
    pruned_at = pruned_epoch(trainer)
    name = cfg.get("optimized_metric")
    report(
        "run summary",
        run_dir,
        metrics,
        head={"run dir": run_dir, "best checkpoint": best or "-"},
        tail={
            **({"pruned after epoch": pruned_at} if pruned_at is not None else {}),
            "wall time (s)": run["wall_seconds"],
            "precision": run["precision"],
            **{label: run[key] for key, label in SPEED_ROWS.items() if key in run},
            **{label: run[key] / 2**20 for key, label in BYTE_ROWS.items() if key in run},
        },
        checkpoints={"best": best or None, "last": str(last) if last.exists() else None},
        run=run,
        optimized_metric={"name": name, "value": metrics.get(name) if name else None},
        **({"chosen": chosen} if chosen else {}),
        **({"pruned": {"epoch": pruned_at}} if pruned_at is not None else {}),
    )
    if last.exists():  # a line to copy, not a table cell: the evaluated network for timm
        ckpt = shlex.quote(str(last))
        print(f"export: python scripts/export_encoder.py {ckpt} encoder.safetensors")
