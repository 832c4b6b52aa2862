"""Shared fixtures: compose configs the way train.py does, run the CLIs in or out of process."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
EXPERIMENTS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))

os.environ.setdefault("WANDB_MODE", "offline")


def compose_cfg(tmp_path: Path, overrides: list[str], config_name: str = "train"):
    """The config `python train.py <overrides>` would run, with its run dir in tmp_path."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name, overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "run")
        cfg.paths.log_dir = str(tmp_path / "logs")
        cfg.paths.data_dir = str(tmp_path / "data")
        cfg.hydra.runtime.output_dir = str(tmp_path / "run")
        cfg.extras.print_config = False
    HydraConfig().set_config(cfg)
    with open_dict(cfg):
        del cfg.hydra  # a real run's task config has no hydra node either
    return cfg


@pytest.fixture
def cfg_factory(tmp_path):
    return lambda *overrides, name="train": compose_cfg(tmp_path, list(overrides), name)


FAST = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "extras.print_config=false",
    "features.enabled=false",  # the end-of-run feature rating; test_train runs it once
]


def run_cli(script: str, *args: str, cwd: Path = ROOT, timeout: int = 300, env=None):
    """Run train.py / eval.py as a user would, in a subprocess; returns CompletedProcess."""
    full_env = {**os.environ, "WANDB_MODE": "offline", **(env or {})}
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def run_in_process(main, argv: list[str], monkeypatch) -> int:
    """Call a Hydra main as `python <argv>` would, in this process; returns the exit code."""
    GlobalHydra.instance().clear()
    monkeypatch.setattr(sys, "argv", argv)
    try:
        main()
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    finally:
        GlobalHydra.instance().clear()


def logged_series(run_dir: Path, key: str) -> list[float]:
    """Every value the CSV logger wrote for ``key`` in a run dir, in step order."""
    (path,) = run_dir.rglob("metrics.csv")
    with path.open() as f:
        return [float(row[key]) for row in csv.DictReader(f) if row.get(key)]
