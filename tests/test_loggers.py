"""Loggers: CSV, TensorBoard and W&B (offline) together; the W&B run id is kept in the run
dir, a resumed run writes its W&B part under the same id, and the W&B API key never reaches
a file: not the run dir, not W&B's own files in the home directory."""

import json
import secrets

import pytest
from conftest import FAST, compose_cfg

from trainlab.training import train


@pytest.mark.slow  # 7 s: make test-slow, which CI runs
def test_many_loggers_offline_and_wandb_id_kept(tmp_path, monkeypatch):
    secret = secrets.token_hex(20)  # a W&B API key's shape, made here (git.diff holds this file)
    monkeypatch.setenv("WANDB_API_KEY", secret)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # ~/.netrc, ~/.config/wandb, ~/.cache
    # Stopped by SIGTERM after step 1 (a finished run is not resumed: its results stay).
    stop = ["+callbacks.stop._target_=signal_at_step.SignalAtStep", "+callbacks.stop.step=1"]
    with pytest.raises(SystemExit) as stopped:
        train(compose_cfg(tmp_path, ["logger=many", *FAST, "trainer.log_every_n_steps=1", *stop]))
    assert stopped.value.code == 143
    run_dir = tmp_path / "run"
    assert (run_dir / "csv" / "metrics.csv").read_text().count("train/loss") >= 1
    assert any((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    run_id = (run_dir / "wandb_id").read_text().strip()
    assert len(run_id) >= 8
    offline_runs = list((run_dir / "wandb").glob(f"offline-run-*-{run_id}"))
    assert offline_runs, list((run_dir / "wandb").iterdir())
    (start,) = json.loads((run_dir / "meta.json").read_text())["starts"]
    assert start["world_size"] == 1 and len(start["devices"]) == 1
    # Resumed offline: a second offline part under the same id, which `wandb sync` uploads
    # after the first into one W&B run (README: W&B offline and resume).
    train(compose_cfg(tmp_path, ["logger=many", *FAST, "resume=true", "trainer.max_epochs=2"]))
    assert json.loads((run_dir / "metrics.json").read_text())["metrics"]["val/probe_acc"] >= 0
    assert (run_dir / "wandb_id").read_text().strip() == run_id
    parts = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert [p.name.rsplit("-", 1)[1] for p in parts] == [run_id, run_id]
    assert all(list(p.glob(f"run-{run_id}.wandb")) for p in parts)
    # The API key is in the environment, never in what the runs or W&B write.
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) > 10
    assert not [p for p in written if secret.encode() in p.read_bytes()]
