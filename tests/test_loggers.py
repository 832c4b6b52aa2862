"""Loggers: CSV, TensorBoard and W&B (offline) together; the W&B run id is kept in the run dir."""

import json

from conftest import FAST, compose_cfg

from trainlab.train import train


def test_many_loggers_offline_and_wandb_id_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    cfg = compose_cfg(tmp_path, ["logger=many", *FAST])
    train(cfg)
    run_dir = tmp_path / "run"
    assert (run_dir / "csv" / "metrics.csv").read_text().count("train/loss") >= 1
    assert any((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    run_id = (run_dir / "wandb_id").read_text().strip()
    assert len(run_id) >= 8
    offline_runs = list((run_dir / "wandb").glob(f"offline-run-*-{run_id}"))
    assert offline_runs, list((run_dir / "wandb").iterdir())
    assert (run_dir / "pictures" / "masks.png").stat().st_size > 1000
    assert json.loads((run_dir / "metrics.json").read_text())["metrics"]["val/probe_acc"] >= 0
