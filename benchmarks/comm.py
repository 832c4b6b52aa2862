"""Bytes sent per optimizer step by each DDP comm hook for a ViT-B, and the loss it reaches.

Each setting trains the same supervised ViT-B/4 (86 M parameters, 16 px digits so a CPU
can afford it) for the same number of steps on 2 gloo processes from train.py, and reads
``comm/bytes_sent_per_step`` / ``comm/bytes_allreduce_per_step`` (logged by
trainlab.callbacks.comm_stats) and the final training loss from the run's metrics.json.
Written to benchmarks/comm.md (the comm hooks part's results, docs/parts/comm_hooks.md):

    python -m benchmarks.comm
"""

import csv
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from trainlab.utils.machine import machine

ROOT = Path(__file__).resolve().parents[1]  # the repository: runs its train.py
RESULTS = Path(__file__).resolve().parent / "comm.md"
STEPS = 40
LAST = 10  # the loss reported: mean train loss over the last LAST steps
VIT_B = [
    "model.net._target_=timm.models.vision_transformer.VisionTransformer",
    "~model.net.widths",
    "+model.net.img_size=16",
    "+model.net.patch_size=4",
    "+model.net.embed_dim=768",
    "+model.net.depth=12",
    "+model.net.num_heads=12",
    "model.optimizer.lr=1e-4",
    "data.image_size=16",
    "data.batch_size=8",
]
PSGD = ["strategy=ddp_powersgd", "strategy.powersgd.start_powerSGD_iter=2"]
SETTINGS = {
    "plain all-reduce": ["strategy=ddp"],
    "PowerSGD rank 1": [*PSGD, "strategy.powersgd.matrix_approximation_rank=1"],
    "PowerSGD rank 2": [*PSGD, "strategy.powersgd.matrix_approximation_rank=2"],
    "PowerSGD rank 4": [*PSGD, "strategy.powersgd.matrix_approximation_rank=4"],
    "fp16 compression": ["strategy=ddp_fp16_compress"],
}


def run(name: str, overrides: list[str], log_dir: Path) -> dict:
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        "experiment=digits_classifier",
        *VIT_B,
        *overrides,
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        f"trainer.max_steps={STEPS}",
        "trainer.log_every_n_steps=1",
        "trainer.limit_val_batches=2",
        "test=false",
        "extras.print_config=false",
        "callbacks.model_summary=null",
        f"paths.log_dir={log_dir}",
        f"run_name={len(list(log_dir.glob('train/runs/*')))}",
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if result.returncode:
        raise RuntimeError(f"{name} failed:\n{result.stderr[-2000:]}")
    (run_dir,) = sorted(log_dir.glob("train/runs/*"), key=lambda p: p.stat().st_mtime)[-1:]
    metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    with next(run_dir.rglob("metrics.csv")).open() as f:
        losses = [float(r["train/loss_step"]) for r in csv.DictReader(f) if r["train/loss_step"]]
    return {
        "sent": metrics.get("comm/bytes_sent_per_step"),
        "dense": metrics.get("comm/bytes_allreduce_per_step"),
        "loss": sum(losses[-LAST:]) / len(losses[-LAST:]),
        "first_loss": sum(losses[:LAST]) / len(losses[:LAST]),
    }


def bench() -> dict:
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides in SETTINGS.items():
            rows[name] = run(name, overrides, Path(tmp))
            print(name, rows[name], flush=True)
    dense = next(r["dense"] for r in rows.values() if r["dense"])
    rows["plain all-reduce"]["sent"] = dense  # no hook: every gradient byte is sent
    for row in rows.values():
        row["rate"] = dense / row["sent"]
    return {"steps": STEPS, "rows": rows}


def table(result: dict) -> str:
    n, last = result["steps"], LAST
    lines = [
        f"| setting | MB sent per step | compression | train loss, steps 1-{last} | "
        f"train loss, steps {n - last + 1}-{n} |",
        "|---|---|---|---|---|",
    ]
    for name, row in result["rows"].items():
        lines.append(
            f"| {name} | {row['sent'] / 1e6:.2f} | {row['rate']:.1f}x | "
            f"{row['first_loss']:.3f} | {row['loss']:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    result = bench()
    RESULTS.write_text(
        f"""# Benchmark: DDP comm hooks, bytes per step and loss (benchmarks/comm.py)

Written by `python -m benchmarks.comm` on {datetime.date.today()}.
Machine: {machine()}.

A supervised ViT-B/4 (86 M parameters) on 16 px digits, 2 gloo processes x batch 8,
AdamW lr 1e-4, {result["steps"]} optimizer steps from the same seed in each setting.
PowerSGD starts at step 2, with error feedback and warm start. Bytes are what each rank
hands to the all-reduce per optimizer step (trainlab.callbacks.comm_stats); the loss is
the mean training loss over the first and the last {LAST} steps.

{table(result)}
"""
    )
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
