"""A run's results survive every command that follows: a finished run is never resumed over,
two processes never write one run dir, and a killed run's debris is gone after its resume."""

import csv
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import ROOT, run_cli, run_in_process

import trainlab.commands

# 2 epochs of 4 steps, a step checkpoint every 2 steps, every step logged.
JOB = [
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "trainer.log_every_n_steps=1",
    "model.encoder.depth=2",
    "callbacks=[default,step_checkpoints]",
    "callbacks.step_checkpoints.every_n_train_steps=2",
    "extras.print_config=false",
    "features.enabled=false",
]


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


def steps_logged(run_dir: Path) -> Counter:
    """How many rows of train/loss_step each step has in metrics.csv."""
    with (run_dir / "csv" / "metrics.csv").open() as f:
        return Counter(int(r["step"]) for r in csv.DictReader(f) if r.get("train/loss_step"))


def losses(run_dir: Path) -> dict[int, str]:
    with (run_dir / "csv" / "metrics.csv").open() as f:
        return {
            int(r["step"]): r["train/loss_step"]
            for r in csv.DictReader(f)
            if r.get("train/loss_step")
        }


def train(monkeypatch, tmp_path, *overrides) -> int:
    argv = ["train.py", *JOB, f"paths.log_dir={tmp_path}", *overrides]
    return run_in_process(trainlab.commands.train_command, argv, monkeypatch)


@pytest.mark.slow  # 9 s: make test-slow, which CI runs
def test_a_finished_run_is_never_resumed_over_and_is_extended_beside_itself(
    tmp_path, monkeypatch, capfd
):
    assert train(monkeypatch, tmp_path, "run_name=done") == 0
    run_dir = tmp_path / "train" / "runs" / "done"
    before = snapshot(run_dir)
    capfd.readouterr()
    for extra in (["resume=true"], ["resume=true", "trainer.max_epochs=3"]):
        assert train(monkeypatch, tmp_path, "run_name=done", *extra) == 2
        lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("error")]
        assert len(lines) == 1 and "finished run" in lines[0] and "resume_from=" in lines[0], lines
        assert snapshot(run_dir) == before  # every file, bytewise
    # Trained further from its last checkpoint: a new run dir, the old one untouched.
    last = run_dir / "checkpoints" / "last.ckpt"
    extend = ["run_name=more", f"resume_from={last}", "trainer.max_epochs=3"]
    assert train(monkeypatch, tmp_path, *extend) == 0
    assert snapshot(run_dir) == before
    more = tmp_path / "train" / "runs" / "more"
    assert sorted(steps_logged(more)) == [8, 9, 10, 11]  # epoch 3 only, from step 8
    assert train(monkeypatch, tmp_path, "run_name=x", "resume_from=nowhere.ckpt") == 2
    assert "resume_from=nowhere.ckpt does not exist" in capfd.readouterr().err
    assert not (tmp_path / "train" / "runs" / "x").exists()


@pytest.mark.slow  # 15 s: make test-slow, which CI runs
def test_a_second_process_is_refused_while_the_first_writes_the_run_dir(tmp_path):
    """The second names the first's PID and exits 2; the first ends as a run alone would,
    every step logged once."""
    run_dir = tmp_path / "train" / "runs" / "shared"
    slow = [*JOB, "trainer.max_epochs=4", f"paths.log_dir={tmp_path}", "run_name=shared"]
    env = {**os.environ, "WANDB_MODE": "offline"}
    first = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *slow],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (run_dir / "csv" / "metrics.csv").exists():  # it is training
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
        time.sleep(0.2)
    second = run_cli("train.py", *slow, cwd=tmp_path)
    assert first.poll() is None, "the first run ended before the second started: make it longer"
    assert second.returncode == 2, second.stderr[-2000:]
    lines = [line for line in second.stderr.splitlines() if line.startswith("error")]
    assert len(lines) == 1 and f"in use by another process (PID {first.pid})" in lines[0], lines
    assert first.wait(timeout=300) == 0, first.stderr.read()[-2000:]
    assert steps_logged(run_dir) == Counter(range(16))  # 4 epochs x 4 steps, each once


@pytest.mark.slow  # three train.py runs in subprocesses, 23 s: make test-slow (CI runs it)
def test_a_killed_run_resumes_without_debris_and_logs_each_step_once(tmp_path):
    """SIGKILL after step 6 (the newest checkpoint: step 4), a temporary checkpoint file left as
    a kill during a save leaves it; resume=true removes it, drops the rows logged after the
    checkpoint, and ends with each step once and the losses of an uninterrupted run."""
    common = [*JOB, f"paths.log_dir={tmp_path}"]
    assert run_cli("train.py", *common, "run_name=straight", cwd=tmp_path).returncode == 0
    kill = [
        "+callbacks.kill._target_=signal_at_step.SignalAtStep",
        "+callbacks.kill.step=6",
        "+callbacks.kill.name=SIGKILL",
    ]
    env = {"PYTHONPATH": str(ROOT / "tests")}
    killed = run_cli("train.py", *common, "run_name=cut", *kill, cwd=tmp_path, env=env)
    assert killed.returncode == -signal.SIGKILL
    run_dir = tmp_path / "train" / "runs" / "cut"
    assert max(steps_logged(run_dir)) >= 4  # logged past the checkpoint at step 4
    debris = run_dir / "checkpoints" / ".last.ckpt.999999.tmp"
    debris.write_bytes(b"\0" * 1000)  # what a kill during a save leaves beside last.ckpt
    resumed = run_cli("train.py", *common, "run_name=cut", "resume=true", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert list(run_dir.glob("checkpoints/*.tmp")) == [] and not debris.exists()
    assert steps_logged(run_dir) == Counter(range(8))
    assert losses(run_dir) == losses(tmp_path / "train" / "runs" / "straight")


@pytest.mark.slow  # 6 s: make test-slow, which CI runs
def test_a_signal_during_the_final_test_says_what_is_saved(tmp_path, monkeypatch, capfd):
    """SIGTERM as the final test starts: exit 143 and one line naming the checkpoints and
    how to test one, where the process used to die without a word."""
    stop = [
        "+callbacks.stop._target_=signal_at_step.SignalAtStep",
        "+callbacks.stop.step=8",
        "+callbacks.stop.in_test=true",
    ]
    assert train(monkeypatch, tmp_path, "run_name=t", *stop) == 143
    err = capfd.readouterr().err
    assert "stopped by SIGTERM during the final test" in err and "python eval.py ckpt_path=" in err
    assert (tmp_path / "train" / "runs" / "t" / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow  # make test-slow: train.py runs in subprocesses
def test_a_second_quick_ctrl_c_exits_130_and_saves_nothing_over_the_checkpoints(tmp_path):
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), *sys.path])}
    done = run_cli(
        "train.py", *JOB, f"paths.log_dir={tmp_path}", "run_name=twice",
        "+callbacks.stop._target_=signal_at_step.SignalAtStep", "+callbacks.stop.step=3",
        "+callbacks.stop.name=SIGINT", "+callbacks.stop.times=2", env=env,
    )  # fmt: skip
    assert done.returncode == 130, done.stderr[-2000:]
    assert "stopped by a second Ctrl-C" in done.stderr and "Traceback" not in done.stderr
    checkpoints = tmp_path / "train" / "runs" / "twice" / "checkpoints"
    assert not list(checkpoints.glob("on_exception*.ckpt"))
    assert (checkpoints / "last.ckpt").exists() or list(checkpoints.glob("*.ckpt"))  # step 2's


@pytest.mark.slow  # make test-slow: train.py runs in subprocesses
def test_a_fresh_start_after_a_kill_before_any_checkpoint_logs_each_step_once(tmp_path):
    """SIGKILL at step 2, before its checkpoint (the first): resume=true finds none and
    starts from step 0; the killed attempt's rows are gone, so each step is logged once."""
    common = [*JOB, f"paths.log_dir={tmp_path}", "run_name=early", "logger=[csv,tensorboard]"]
    kill = ["+callbacks.kill._target_=signal_at_step.SignalAtStep", "+callbacks.kill.step=2",
            "+callbacks.kill.name=SIGKILL"]  # fmt: skip
    env = {"PYTHONPATH": str(ROOT / "tests")}
    assert run_cli("train.py", *common, *kill, cwd=tmp_path, env=env).returncode == -signal.SIGKILL
    run_dir = tmp_path / "train" / "runs" / "early"
    assert steps_logged(run_dir) and not list(run_dir.glob("checkpoints/*.ckpt"))
    resumed = run_cli("train.py", *common, "resume=true", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert steps_logged(run_dir) == Counter(range(8))
    # TensorBoard: the writer hides the killed attempt's events (purge_step), as its reader
    # shows them: each step once.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard")).Reload()
    assert Counter(e.step for e in events.Scalars("train/loss_step")) == Counter(range(8))


RATED = ["features.enabled=true", "features.train_per_class=10", "features.eval_per_class=5"]


def results(run_dir: Path) -> dict:
    """metrics.json's metrics, and its run facts that do not time the whole command."""
    import json

    written = json.loads((run_dir / "metrics.json").read_text())
    run = {k: v for k, v in written["run"].items() if k in ("fit_seconds", "world_size")}
    return {**written["metrics"], **run}


@pytest.mark.slow  # four train.py runs in this process, about 40 s: make test-slow
@pytest.mark.parametrize("where, name", [("table", "SIGTERM"), ("table", "SIGINT"), ("test", "SIGUSR1")])  # fmt: skip
def test_a_stop_after_the_fit_keeps_every_training_metric(
    tmp_path, monkeypatch, capfd, where, name
):
    """A stop signal during the end-of-run table or the final test: one line and 128 +
    signal; resume=true finds the fit done, tests and rates again, and metrics.json holds
    every metric of the same run uninterrupted (val/*, train/loss, test/*, the table's) and
    the fit's time, not the empty fit of the resume."""
    import trainlab.run.frozen_features as table

    assert train(monkeypatch, tmp_path, *RATED, "run_name=whole") == 0
    cut = [*RATED, "run_name=cut"]
    signum = getattr(signal, name)
    if where == "table":
        rate = table.rate_checkpoint

        def stopped_rate(*args, **kwargs):
            os.kill(os.getpid(), signum)  # as SLURM or a user would, mid-table
            return rate(*args, **kwargs)

        monkeypatch.setattr(table, "rate_checkpoint", stopped_rate)
        stop = []
        said = f"stopped by {name} during the end-of-run table"
    else:
        monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests"))
        monkeypatch.syspath_prepend(str(ROOT / "tests"))
        stop = ["+callbacks.stop._target_=signal_at_step.SignalAtStep", "+callbacks.stop.step=8",
                "+callbacks.stop.in_test=true", f"+callbacks.stop.name={name}"]  # fmt: skip
        said = f"stopped by {name} during the final test"
    capfd.readouterr()
    assert train(monkeypatch, tmp_path, *cut, *stop) == 128 + signum
    err = capfd.readouterr().err
    assert said in err and "Traceback" not in err, err[-2000:]
    run_dir = tmp_path / "train" / "runs" / "cut"
    assert not (run_dir / "metrics.json").exists()
    monkeypatch.undo()
    assert train(monkeypatch, tmp_path, *cut, "resume=true") == 0
    resumed, whole = results(run_dir), results(tmp_path / "train" / "runs" / "whole")
    assert {"val/probe_acc", "train/loss", "test/probe_acc", "features/linear_acc"} <= set(whole)
    assert resumed.keys() == whole.keys()
    for key in whole:  # timed ones: the first attempt's, not the resume's empty fit
        if key != "fit_seconds" and not key.endswith("_per_s"):
            assert resumed[key] == whole[key], key
    assert resumed["fit_seconds"] > 1


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (Linux's SigCgt)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(
        next(line for line in status.splitlines() if line.startswith("SigCgt")).split()[1], 16
    )
    return bool(caught >> (signum - 1) & 1)


def test_sigterm_handler_goes_in_last(monkeypatch):
    """The test below sends its signal once the process catches SIGTERM: that holds only if
    SIGTERM's handler is the last of the three to go in."""
    from trainlab.run import stop_signals

    installed = []
    real = signal.signal
    monkeypatch.setattr(signal, "signal", lambda s, h: installed.append(s) or real(s, h))
    with stop_signals.signals_raise_stopped():
        pass
    assert set(installed[:3]) == set(stop_signals.STOPS) and installed[2] == signal.SIGTERM


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGUSR1"])
def test_a_stop_before_training_starts_is_one_line_and_leaves_nothing(tmp_path, name):
    """A stop signal while the run starts (checks, imports, building), before the fit's own
    handling: one line, exit 128 + signal, and the run dir Hydra made is gone. Python's
    defaults ended it silently (TERM, USR1) or with a traceback (Ctrl-C) and left the dir."""
    logs = tmp_path / "logs"
    cmd = [sys.executable, str(ROOT / "train.py"), f"paths.log_dir={logs}", "run_name=early"]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not catches(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.01)  # SIGTERM's handler goes in last (stop_signals.STOPS)
    proc.send_signal(signal.Signals[name])
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.Signals[name], err[-2000:]
    assert err.strip().splitlines() == [
        f"stopped by {name} outside training; nothing was written: run the same command again"
    ], err[-2000:]
    assert not (logs / "train" / "runs" / "early").exists()
