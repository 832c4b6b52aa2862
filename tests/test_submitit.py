"""The submitit part: launcher=slurm and launcher=submitit_local. Its jobs on a real cluster
are in test_slurm.py, and a requeued local job beside its uninterrupted twin in
test_resilience.py: both skip once this part is removed."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, assert_one_clear_line, compose_cfg
from hydra.core.hydra_config import HydraConfig

from trainlab.launcher.job_start import SubmititJobStart
from trainlab.utils import submitit_internals


def test_submitits_pre_emption_signal_is_read_where_it_was_checked():
    assert submitit_internals.requeue_signal() == signal.SIGUSR2  # without SUBMITIT_USR_SIG


@pytest.mark.parametrize(
    "overrides, gpus",
    [(["trainer.accelerator=cpu", "trainer.devices=2"], 0), (["trainer.devices=8"], 8)],
)
def test_a_cpu_job_asks_slurm_for_no_gpu(tmp_path, overrides, gpus):
    """A partition without GPUs refuses any GPU request; ``auto`` asks for trainer.devices."""
    compose_cfg(tmp_path, ["launcher=slurm", *overrides])
    assert HydraConfig.get().launcher.gpus_per_node == gpus


def test_each_local_task_gets_its_rank_before_the_run(monkeypatch):
    """Task 1 of 2 of a local submitit job: torch's env:// variables, read by Lightning."""
    from lightning_utilities.core.rank_zero import rank_zero_only

    monkeypatch.setattr(rank_zero_only, "rank", 0, raising=False)
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items()
                                        if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")})  # fmt: skip
    os.environ.update(
        SUBMITIT_EXECUTOR="local", SUBMITIT_LOCAL_JOB_ID="7", SUBMITIT_LOCAL_NTASKS="2",
        SUBMITIT_LOCAL_JOB_NUM_NODES="1", SUBMITIT_LOCAL_NODEID="0",
        SUBMITIT_LOCAL_GLOBALID="1", SUBMITIT_LOCAL_LOCALID="1",
    )  # fmt: skip
    SubmititJobStart().on_job_start(config=None)
    assert {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")} == {
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"
    }  # fmt: skip


def test_slurm_launcher_without_slurm_is_one_line(tmp_path):
    """launcher=slurm where there is no srun: one line naming the local alternatives, not
    submitit's 36-line traceback. No SLURM here, whatever the machine has: a PATH of the
    venv alone, no SLURM_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = str(Path(sys.executable).parent)
    slurm = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-m", "launcher=slurm", f"paths.log_dir={tmp_path}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert slurm.returncode == 2 and "Traceback" not in slurm.stderr, slurm.stderr[-2000:]
    assert_one_clear_line(slurm.stderr, "srun", "launcher=submitit_local")
