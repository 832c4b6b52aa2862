"""Runs survive stops and crashes: exact resume, pre-emption signals, atomic checkpoints,
errors, and torchrun restarting killed ranks."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import (
    FAST,
    ROOT,
    free_port,
    needs_submitit,
    run_cli,
    start_torchrun_node,
    train_in_process,
)

from trainlab.run import run_dir as rundir

# 2 epochs of 6 steps; drop path, random crops and masks all draw random numbers.
SHORT = [
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=6",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.log_every_n_steps=1",
    "model.encoder.drop_path_rate=0.1",
    "extras.print_config=false",
    "features.enabled=false",  # the end-of-run rating: test_train covers it
]


# The jobs of the 2-rank tests: 2 epochs of 8 steps, a step checkpoint every 2 steps.
TWO_RANK_JOB = [
    "trainer.accelerator=cpu",
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=8",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.log_every_n_steps=1",
    "model.encoder.depth=2",
    "callbacks=[default,step_checkpoints]",
    "callbacks.step_checkpoints.every_n_train_steps=2",
    "extras.print_config=false",
]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """TWO_RANK_JOB run whole by Lightning's own launcher, 2 processes of one thread each:
    the run the lost-node and the submitit jobs must end equal to. One twin serves both, as a
    DDP job's numbers depend on its world size and thread count, not on what launched it
    (test_distributed: 2 torchrun nodes train like 1 node of 2 processes, bit for bit)."""
    log_dir = tmp_path_factory.mktemp("uninterrupted")
    job = [*TWO_RANK_JOB, "trainer.devices=2", f"paths.log_dir={log_dir}", "run_name=whole"]
    whole = run_cli("train.py", *job, cwd=log_dir, env={"OMP_NUM_THREADS": "1"})
    assert whole.returncode == 0, whole.stderr[-3000:]
    return log_dir / "train" / "runs" / "whole"


def assert_ends_as(run_dir: Path, whole: Path, epochs: bool = True) -> None:
    """Every logged step's loss (rank 0's), every epoch's train/loss (every rank's, the stopped
    epoch's steps before and after the stop counted) and validation (``epochs``), and every
    test metric of ``run_dir`` are ``whole``'s, bitwise."""
    assert losses_by_step(run_dir) == losses_by_step(whole)
    if epochs:
        for key in ("train/loss", "val/probe_acc", "val/loss"):
            assert losses_by_step(run_dir, key) == losses_by_step(whole, key), key
    test_metrics = [
        {
            k: v
            for k, v in json.loads((d / "metrics.json").read_text())["metrics"].items()
            if k.startswith("test/")
        }
        for d in (run_dir, whole)
    ]
    assert test_metrics[0] and test_metrics[0] == test_metrics[1]


def losses_by_step(run_dir: Path, key: str = "train/loss_step") -> dict[int, str]:
    """The logged values as written (exact strings); a step logged twice keeps its last value."""
    import csv

    with (run_dir / "csv" / "metrics.csv").open() as f:
        return {int(row["step"]): row[key] for row in csv.DictReader(f) if row.get(key)}


def test_a_resume_that_starts_again_sets_the_earlier_attempts_checkpoints_aside(
    tmp_path, monkeypatch
):
    """An attempt that left a best checkpoint but no last.ckpt (a full disk at its save):
    resume=true has nothing to continue from and starts again. The earlier checkpoints move,
    bytes intact, to replaced_attempt_<time>/, and checkpoints/ holds the new attempt's alone."""
    job = [*SHORT, "trainer.max_epochs=1", "trainer.limit_train_batches=2", "test=false"]
    assert train_in_process(monkeypatch, tmp_path, *job, "run_name=r") == 0
    run_dir = tmp_path / "train" / "runs" / "r"
    (run_dir / "metrics.json").unlink()  # as if the attempt had failed at its last save
    (run_dir / "checkpoints" / "last.ckpt").unlink()
    left = {p.name: p.read_bytes() for p in (run_dir / "checkpoints").glob("*.ckpt")}
    assert left  # its best checkpoint
    assert train_in_process(monkeypatch, tmp_path, *job, "run_name=r", "resume=true") == 0
    (aside,) = run_dir.glob("replaced_attempt_*")  # named by the attempt's time
    assert {p.name: p.read_bytes() for p in aside.iterdir()} == left
    assert f"moved to {aside}" in (run_dir / "train.log").read_text()
    now = sorted(p.name for p in (run_dir / "checkpoints").glob("*.ckpt"))
    assert "last.ckpt" in now and sorted(left) == sorted(set(now) - {"last.ckpt"}), now


def stop_at(step: int, signal_name: str = "SIGTERM", group: bool = False) -> list[str]:
    return [
        "+callbacks.stop._target_=signal_at_step.SignalAtStep",
        f"+callbacks.stop.step={step}",
        f"+callbacks.stop.name={signal_name}",
        *(["+callbacks.stop.group=true"] if group else []),
    ]


@pytest.mark.slow  # 40 s: make test-slow, which CI runs
def test_stop_signals_to_the_whole_process_group_save_and_the_resume_is_exact(
    tmp_path, monkeypatch
):
    """With 2 data workers, as SLURM's srun and `kill -- -PGID` signal a job: SIGTERM to the
    whole process group after step 6, epoch 0's last batch (of 6), stops the run before
    that epoch's validation; resumed, Ctrl-C (SIGINT) after step 8 stops it after the next
    one, step 9, mid-epoch 1; resumed, SIGUSR1 after step 10 stops it at 11; resumed again, every
    step's train/loss equals the uninterrupted run's, bitwise, and so do each epoch's mean
    (the stopped epoch's first steps counted) and validation (the first resume runs epoch
    0's), and no row of the first parts is lost. The workers leave the signals to the main
    process (data/worker_signals.py): killed, they made the run fail with no checkpoint to
    resume."""
    job = [*SHORT, "data.num_workers=2"]
    assert train_in_process(monkeypatch, tmp_path, *job, "run_name=straight") == 0
    cut = [*job, "run_name=cut", "resume=true"]
    env = {"PYTHONPATH": str(ROOT / "tests")}
    run_dir = tmp_path / "train" / "runs" / "cut"
    for step, name, code, at in [(6, "SIGTERM", 143, 6), (8, "SIGINT", 130, 9), (10, "SIGUSR1", 138, 11)]:  # fmt: skip
        stopped = subprocess.run(
            [sys.executable, str(ROOT / "train.py"), *cut, *stop_at(step, name, group=True),
             f"paths.log_dir={tmp_path}"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
            env={**os.environ, **env}, start_new_session=True,  # a group of its own to signal
        )  # fmt: skip
        assert stopped.returncode == code, stopped.stderr[-3000:]
        assert f"stopped by {name} at step {at}" in stopped.stderr
        said = (run_dir / "train.log").read_text().count(f"received {name}")
        assert said == 1  # by the main process, not by each data worker too
        last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
        assert last["global_step"] == at
        assert "train/loss_step" in last["callback_metrics"]  # put back when the fit resumes
    assert "starting fresh" in (run_dir / "train.log").read_text()  # resume=true, no checkpoint
    assert train_in_process(monkeypatch, tmp_path, *cut) == 0
    straight = tmp_path / "train" / "runs" / "straight"
    expected = losses_by_step(straight)
    assert sorted(expected) == list(range(12))
    assert losses_by_step(run_dir) == expected
    for key in ("train/loss", "val/probe_acc", "val/rankme"):  # every epoch's, once each
        epochs = losses_by_step(straight, key)
        assert len(epochs) == 2 and losses_by_step(run_dir, key) == epochs, key


@pytest.mark.slow  # three train.py runs, 25 s: make test-slow, which CI runs
def test_a_resume_from_an_epoch_end_checkpoint_with_loader_workers_is_exact(tmp_path, monkeypatch):
    """2 data workers, SIGKILL to the whole group after step 8 (epoch 1, 6 steps an epoch):
    last.ckpt is epoch 0's end. Resumed, epoch 1 is epoch 1's batches, not epoch 0's again:
    the workers fetch ahead before Lightning sets the sampler's epoch, so the loader is built
    with the epoch whose batches come next. Every step's loss equals the uninterrupted run's."""
    job = [*SHORT, "trainer.max_epochs=3", "data.num_workers=2", "test=false"]
    assert train_in_process(monkeypatch, tmp_path, *job, "run_name=straight") == 0
    cut = [*job, "run_name=cut"]
    killed = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *cut, *stop_at(8, "SIGKILL", group=True),
         f"paths.log_dir={tmp_path}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT / "tests")}, start_new_session=True,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    run_dir = tmp_path / "train" / "runs" / "cut"
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 6
    assert train_in_process(monkeypatch, tmp_path, *cut, "resume=true") == 0
    expected = losses_by_step(tmp_path / "train" / "runs" / "straight")
    assert sorted(expected) == list(range(18))
    assert losses_by_step(run_dir) == expected


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGINT"])
def test_sigusr1_and_ctrl_c_save_last_checkpoint_and_exit(tmp_path, monkeypatch, capfd, name):
    """SIGUSR1 or Ctrl-C (SIGINT) after step 2: the run stops after the next step, saves
    last.ckpt, says how to continue and exits 128 + signal (a Ctrl-C that stopped at once
    would keep only the last epoch's last.ckpt). Saving says nothing of Lightning's defaults."""
    number = signal.Signals[name].value
    before = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGINT)}
    run = [*FAST, f"run_name={name}", "model.encoder.depth=1"]
    assert train_in_process(monkeypatch, tmp_path, *run, *stop_at(2, name)) == 128 + number
    out, err = capfd.readouterr()
    assert f"stopped by {name} at step 3" in err and "resume=true" in err
    assert "`weights_only` was not set" not in out + err
    last = tmp_path / "train" / "runs" / name / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 3
    assert {s: signal.getsignal(s) for s in before} == before  # handlers restored


@pytest.mark.parametrize(
    ("at_step", "error", "kept"),
    [
        (2, "worker lost", True),
        (0, "worker lost", False),
        pytest.param(  # the DistBackendError row runs in make test; this one in test-slow
            2,
            "[gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:29500",
            False,
            marks=pytest.mark.slow,
        ),
        (2, "DistBackendError", False),
    ],
)
def test_an_error_in_training_saves_an_on_exception_checkpoint(
    tmp_path, monkeypatch, capfd, at_step, error, kept
):
    """An error at step 2 keeps the state there; one before any step keeps no file (it would
    hold the untrained weights), nor does another rank's death (this rank stopped inside a
    collective: rank 1 wrote on_exception.rank1.ckpt after rank 0's SIGKILL)."""
    import torch.distributed as dist

    from trainlab.model.vicreg import VICReg

    real_step = VICReg.training_step

    def failing(self, batch, batch_idx):
        if self.global_step == at_step:
            if error == "DistBackendError":
                raise dist.DistBackendError("NCCL communicator was aborted")
            raise RuntimeError(error)
        return real_step(self, batch, batch_idx)

    monkeypatch.setattr(VICReg, "training_step", failing)
    argv = [*FAST, "run_name=boom", "model.encoder.depth=1"]
    assert train_in_process(monkeypatch, tmp_path, *argv) == 1
    assert error.split(" ")[0] in capfd.readouterr().err
    path = tmp_path / "train" / "runs" / "boom" / "checkpoints" / "on_exception.ckpt"
    if kept:
        assert torch.load(path, weights_only=True)["global_step"] == at_step
    else:
        assert not path.exists()


def test_step_checkpoints_keep_the_last_k(tmp_path, monkeypatch):
    argv = [
        *FAST,
        "trainer.limit_train_batches=7",
        "model.encoder.depth=1",
        "run_name=steps",
        "callbacks=[default,step_checkpoints]",
        "callbacks.step_checkpoints.every_n_train_steps=2",
        "callbacks.step_checkpoints.save_top_k=2",
    ]
    assert train_in_process(monkeypatch, tmp_path, *argv) == 0
    checkpoints = tmp_path / "train" / "runs" / "steps" / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("step*.ckpt")) == [
        "step000004.ckpt",
        "step000006.ckpt",
    ]
    assert not list(checkpoints.glob(".*tmp"))  # no temporary file left behind
    assert rundir.resume_checkpoint(checkpoints.parent).name == "last.ckpt"  # epoch end, newest
    (checkpoints / "step000006.ckpt").touch()  # as if written after last.ckpt
    assert rundir.resume_checkpoint(checkpoints.parent).name == "step000006.ckpt"


SAVE_BIG = """
import sys, torch
from trainlab.trainer.atomic_checkpoint_io import AtomicCheckpointIO
io = AtomicCheckpointIO()
io.save_checkpoint({"step": 1, "w": torch.ones(4)}, sys.argv[1])
print("first saved", flush=True)
io.save_checkpoint({"step": 2, "w": torch.zeros(400_000_000, dtype=torch.uint8)}, sys.argv[1])
print("second saved", flush=True)
"""


@pytest.mark.slow  # 6 s: make test-slow, which CI runs
def test_a_kill_during_a_save_leaves_the_previous_checkpoint_whole(tmp_path):
    path = tmp_path / "last.ckpt"
    proc = subprocess.Popen(
        [sys.executable, "-c", SAVE_BIG, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "first saved"
    deadline = time.monotonic() + 60
    while not any(p.stat().st_size > 0 for p in tmp_path.glob(".last.ckpt.*.tmp")):
        assert time.monotonic() < deadline and proc.poll() is None, "the second save never started"
        time.sleep(0.01)
    proc.kill()  # SIGKILL while the 400 MB checkpoint is being written
    proc.wait()
    assert torch.load(path, weights_only=True)["step"] == 1


@pytest.mark.slow  # 100 s of torchrun restarts (the twin is a fixture): make test-slow
def test_torchrun_restarts_a_killed_rank_and_the_run_ends_as_if_uninterrupted(
    tmp_path, uninterrupted
):
    """research/chaos.py: 2 CPU ranks under torchrun --max-restarts; rank 0 or 1 gets SIGKILL
    in the middle of epoch 0 (once step000004.ckpt exists, of 8 steps); both restart, resume
    from that checkpoint and finish with the uninterrupted run's losses and test metrics.
    chaos.py's job is TWO_RANK_JOB with 2 epochs; the twin ran it by Lightning's launcher."""
    out = tmp_path / "chaos.json"
    args = ["--runs", "1", "--kill-when", "step000004.ckpt", "--json", str(out)]
    args += ["--log-dir", str(tmp_path / "logs"), "--set", "trainer.max_epochs=2"]
    args += ["--reference", str(uninterrupted)]
    result = subprocess.run(
        [sys.executable, str(ROOT / "research" / "chaos.py"), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    (run,) = json.loads(out.read_text())["runs"]
    assert run["killed"] is not None and run["restarts"] >= 1
    assert run["finished"] and run["losses_match"] and run["metrics_match"]
    log = (tmp_path / "logs" / "train" / "runs" / "chaos0" / "train.log").read_text()
    assert "resuming from" in log and "checkpoints/step0000" in log


@pytest.mark.slow  # three runs in subprocesses, 34 s: make test-slow (CI runs it)
def test_sigkill_during_validation_resumes_exactly_from_a_step_checkpoint(tmp_path):
    """Killed while validating epoch 0 (step checkpoints every 2 steps, 6 per epoch): the
    resume starts from step 4, not from a checkpoint at the epoch's last batch, whose
    resume would replay epoch 0's order in epoch 1 (found by research/chaos.py)."""
    steps = [
        "callbacks=[default,step_checkpoints]",
        "callbacks.step_checkpoints.every_n_train_steps=2",
    ]
    run = [*SHORT, *steps, f"paths.log_dir={tmp_path}"]
    env = {"PYTHONPATH": str(ROOT / "tests")}
    assert run_cli("train.py", *run, "run_name=straight", cwd=tmp_path).returncode == 0
    kill = [*stop_at(6, "SIGKILL"), "+callbacks.stop.in_validation=true"]
    cut = [*run, "run_name=cut", "resume=true"]
    assert run_cli("train.py", *cut, *kill, cwd=tmp_path, env=env).returncode == -signal.SIGKILL
    run_dir = tmp_path / "train" / "runs" / "cut"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "step000002.ckpt",
        "step000004.ckpt",
    ]
    assert run_cli("train.py", *cut, cwd=tmp_path).returncode == 0
    assert losses_by_step(run_dir) == losses_by_step(tmp_path / "train" / "runs" / "straight")


@pytest.mark.slow  # a 2-node job with a lost node (the twin is a fixture): about 2 minutes
def test_a_lost_node_is_replaced_and_the_job_ends_as_if_uninterrupted(tmp_path, uninterrupted):
    """Two torchrun agents as nodes 0 and 1 on loopback (one process each, MAX_RESTARTS=3).
    Node 1 is lost once step000004.ckpt exists (its agent and its worker SIGKILLed) and a new
    agent takes its place, as a scheduler would start a replacement node. Node 0's agent
    restarts its worker, both resume from the newest step checkpoint, and the logged losses
    and test metrics equal those of the same job run without a loss."""
    lost = [*TWO_RANK_JOB, "resume=true", f"paths.log_dir={tmp_path}", "run_name=lost"]
    port = free_port()
    node0 = start_torchrun_node(lost, 0, 2, 1, port, max_restarts=3)
    time.sleep(2)  # node 0 hosts the rendezvous store, as the node at MASTER_ADDR would
    node1 = start_torchrun_node(lost, 1, 2, 1, port, max_restarts=3)
    run_dir = tmp_path / "train" / "runs" / "lost"
    deadline = time.monotonic() + 300
    while not (run_dir / "checkpoints" / "step000004.ckpt").exists():
        assert node0.poll() is None and time.monotonic() < deadline, node0.communicate()[0][-3000:]
        time.sleep(0.05)
    children = Path(f"/proc/{node1.pid}/task/{node1.pid}/children").read_text().split()
    for pid in [node1.pid, *map(int, children)]:
        os.kill(pid, signal.SIGKILL)
    node1.communicate()
    replacement = start_torchrun_node(lost, 1, 2, 1, port, max_restarts=3)
    for agent in (node0, replacement):
        out = agent.communicate(timeout=400)[0]
        assert agent.returncode == 0, out[-3000:]
    log = (run_dir / "train.log").read_text()
    assert "resuming from" in log and "checkpoints/step0000" in log
    assert_ends_as(run_dir, uninterrupted)


@pytest.mark.slow  # three 2-rank runs (the twin is a fixture): about 80 s
def test_a_stop_signal_to_every_process_of_a_2_rank_job_resumes_as_if_uninterrupted(
    tmp_path, uninterrupted
):
    """SIGTERM to the whole process group of a 2-rank job with 2 data workers a rank, as
    srun sends it (every rank and worker at once), after step 3: the ranks agree on it
    at batch 4 (every 2 batches here) and save last.ckpt mid-epoch 0, after step 5, and
    every process exits (rank 0 with 128 + 15). Resumed, SIGTERM after step 7, past the
    epoch's last agreement point (batch 6 of 8): the ranks agree at the validation's start
    and save last.ckpt after step 8, before it. Resumed on 2 ranks, the job ends with the
    losses, epoch validations and test metrics of the same job run uninterrupted (neither
    the data workers nor the agreement's collective change them)."""
    job = [*TWO_RANK_JOB, "trainer.devices=2", "data.num_workers=2", "resume=true"]
    job += ["callbacks.interruption.agree_every_n_batches=2"]
    job += [f"paths.log_dir={tmp_path}", "run_name=group"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "tests")}
    run_dir = tmp_path / "train" / "runs" / "group"
    for step, saved in [(3, 5), (7, 8)]:
        stopped = subprocess.run(
            [sys.executable, str(ROOT / "train.py"), *job, *stop_at(step, group=True)],
            cwd=tmp_path, capture_output=True, text=True, timeout=400, env=env,
            start_new_session=True,  # a group of its own to signal
        )  # fmt: skip
        assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
        last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
        assert last["global_step"] == saved
    resumed = run_cli("train.py", *job, cwd=tmp_path, env=env, timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_ends_as(run_dir, uninterrupted)


@pytest.mark.slow  # a 2-task submitit job with a requeue (the twin is a fixture): about 90 s
@needs_submitit
def test_submitit_requeue_on_the_slurm_signal_ends_as_if_uninterrupted(tmp_path, uninterrupted):
    """launcher=submitit_local runs launcher=slurm's code (submitit: one process per task, a
    pickled job, requeue on the pre-emption signal) without SLURM. Both tasks get SIGUSR2
    after step 5, as SLURM's --signal sends it to every task: they save last.ckpt at the
    same batch, submitit requeues the job, and it resumes to the losses, epoch means,
    validations and test metrics of the same job run by Lightning's own launcher with 2
    processes."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    job = [*TWO_RANK_JOB, "trainer.devices=2", f"paths.log_dir={tmp_path}"]
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "tests")}  # the twin's threads
    signals = [
        f"+callbacks.usr2_{rank}.{key}={value}"
        for rank in (0, 1)
        for key, value in [
            ("_target_", "signal_at_step.SignalAtStep"),
            ("step", 5),
            ("name", "SIGUSR2"),
            ("rank", rank),
        ]
    ]
    sweep = tmp_path / "requeued"
    args = ["-m", "launcher=submitit_local", *job, *signals, f"hydra.sweep.dir={sweep}"]
    requeued = run_cli("train.py", *args, cwd=tmp_path, env=env, timeout=400)
    assert requeued.returncode == 0, requeued.stdout[-2000:] + requeued.stderr[-3000:]
    run_dir = sweep / "0"
    log = (run_dir / "train.log").read_text()
    assert log.count("Caught signal SIGUSR2") == 2 and "Requeued job" in log
    assert f"resuming from {run_dir}/checkpoints/last.ckpt" in log
    assert not (run_dir / "checkpoints" / "last-v1.ckpt").exists()  # last.ckpt is the last
    with (run_dir / "csv" / "metrics.csv").open() as f:
        steps = [row["step"] for row in csv.DictReader(f) if row.get("train/loss_step")]
    assert len(steps) == len(set(steps)) == 16  # every step logged once, none replayed
    assert_ends_as(run_dir, uninterrupted)  # the stopped epoch's mean too, every rank's
