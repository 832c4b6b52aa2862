"""SLURM for real: a one-node cluster (scripts/slurm_cluster.sh, from Debian's slurm-wlm and
munge) runs scripts/slurm.sbatch and launcher=slurm jobs, pre-empts them with the notice a
cluster sends (``scancel -s USR1``, what ``sbatch --signal=SIGUSR1@N`` sends to every task;
USR2 for submitit) and requeues them; each ends as if it had run uninterrupted.

No mock: sbatch, srun, scancel and scontrol are SLURM's own. SLURM holds a requeued job
for its credential's life (``cred_expire``: 120 s by default, 10 s on the cluster
scripts/slurm_cluster.sh starts). Where no cluster runs and none can be started
(not root, no package index), the tests skip and say why."""

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, needs_submitit, run_cli
from test_resilience import TWO_RANK_JOB, losses_by_step

pytestmark = pytest.mark.slow

# test_resilience's 2-rank job (I-JEPA, depth 2), the ranks agreeing every 2 batches.
JOB = [*TWO_RANK_JOB, "callbacks.interruption.agree_every_n_batches=2", "model.warmup_epochs=1"]
JOB += ["features.enabled=false"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "tests")}


def answers() -> bool:
    return (
        shutil.which("sinfo") is not None
        and subprocess.run(["sinfo"], capture_output=True, timeout=30).returncode == 0
    )


@pytest.fixture(scope="module")
def cluster():
    """A running cluster: the machine's own, or one started here and stopped after."""
    if answers():
        yield
        return
    if os.geteuid() != 0:
        pytest.skip("no SLURM cluster answers here, and starting one needs root")
    script = str(ROOT / "scripts" / "slurm_cluster.sh")
    started = subprocess.run([script, "start"], capture_output=True, text=True, timeout=900)
    if started.returncode != 0:
        pytest.skip(f"could not start a SLURM cluster: {started.stderr.strip()[-300:]}")
    yield
    subprocess.run([script, "stop"], capture_output=True, timeout=120)


def wait_at(step: int | str, marker: Path, timeout: float = 120) -> list[str]:
    """Every rank waits after ``step`` (or where the final test starts: "test") until a stop
    signal reaches it (signal_at_step.py)."""
    name = f"wait_{step}"
    at = "in_test=true" if step == "test" else f"step={step}"
    return [
        f"+callbacks.{name}._target_=signal_at_step.WaitForSignalAtStep",
        f"+callbacks.{name}.{at}",
        f"+callbacks.{name}.marker={marker}",
        f"+callbacks.{name}.timeout={timeout}",
    ]


def state(job: str) -> str:
    """PENDING, RUNNING, ...; "" once the job has left the queue; "UNKNOWN" while squeue
    cannot answer (a busy controller), so that no wait ends on it."""
    done = subprocess.run(
        ["squeue", "--noheader", "--jobs", job, "--format", "%T"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if done.returncode != 0:
        return "" if "Invalid job id" in done.stderr else "UNKNOWN"
    return done.stdout.strip()


def until(condition, what: str, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.2)


def release(job: str) -> None:
    """A requeued job waits its old credential's life (``cred_expire``, 10 s on this cluster)
    and starts again; released sooner, it was refused ("Job credential revoked")."""
    until(lambda: state(job) == "PENDING", f"job {job} to be requeued")
    until(lambda: state(job) != "PENDING", f"job {job} to start again")


def preempt(job: str, signal_name: str, markers: list[Path]) -> None:
    """The notice to every task once they all wait, then the requeued job released."""
    until(lambda: all(m.exists() for m in markers) or not state(job), f"{markers[0].name}")
    assert all(m.exists() for m in markers), f"job {job} ended before {markers[0].name}"
    subprocess.run(["scancel", "--signal", signal_name, job], check=True, timeout=30)
    release(job)


@pytest.mark.parametrize("tasks", [1, 2])
def test_an_sbatch_job_preempted_twice_ends_as_if_uninterrupted(tmp_path, cluster, tasks):
    """scripts/slurm.sbatch on 1 and on 2 tasks, SIGUSR1 to every task at step 2, again at
    step 7 and where the final test starts: in training the tasks agree on a batch, save
    checkpoints/last.ckpt, rank 0 requeues the job and it resumes from there; in the test it
    stops, is requeued and tests again. It ends with the per-step losses, epoch means,
    validations and test metrics of the same job run whole by Lightning's launcher, bitwise;
    no other checkpoint is written and no warning reaches the console."""
    markers = [tmp_path / "first", tmp_path / "second", tmp_path / "in_test"]
    submitted = subprocess.run(
        ["sbatch", "--parsable", f"--output={tmp_path}/slurm-%j.out", "--gpus-per-node=0",
         f"--ntasks-per-node={tasks}", "--cpus-per-task=1", f"--mem={3 * tasks}G", "--time=10",
         "scripts/slurm.sbatch", *JOB, f"paths.log_dir={tmp_path}/logs",
         *wait_at(2, markers[0]), *wait_at(7, markers[1]), *wait_at("test", markers[2])],
        cwd=ROOT, capture_output=True, text=True, check=True, env=ENV, timeout=60,
    )  # fmt: skip
    job = submitted.stdout.strip()
    for marker in markers:
        preempt(job, "USR1", [marker.with_suffix(f".{rank}") for rank in range(tasks)])
    until(lambda: state(job) == "", f"job {job} to end", seconds=600)
    whole = run_cli(
        "train.py", *JOB, f"trainer.devices={tasks}", f"paths.log_dir={tmp_path}/whole",
        "run_name=whole", cwd=tmp_path, env={"OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert whole.returncode == 0, whole.stderr[-3000:]

    console = (tmp_path / f"slurm-{job}.out").read_text()
    run_dir = tmp_path / "logs" / "train" / "runs" / f"slurm-{job}"
    assert console.count("stopped by SIGUSR1") == 3, console[-3000:]
    assert console.count("SLURM requeues the job") == 3
    assert (run_dir / "metrics.json").is_file(), console[-3000:]
    assert not [line for line in console.splitlines() if "warn" in line.lower()]
    assert not list(run_dir.rglob("hpc_ckpt*")), sorted(run_dir.rglob("*.ckpt"))
    reference = tmp_path / "whole" / "train" / "runs" / "whole"
    for key in ("train/loss_step", "train/loss", "val/probe_acc"):
        assert losses_by_step(run_dir, key) == losses_by_step(reference, key), key
    tested = [
        {k: v for k, v in json.loads((d / "metrics.json").read_text())["metrics"].items()
         if k.startswith("test/")}
        for d in (run_dir, reference)
    ]  # fmt: skip
    assert tested[0] and tested[0] == tested[1]


def test_a_notice_during_the_end_of_run_table_requeues_and_rates_again(tmp_path, cluster):
    """SIGUSR1 while the end-of-run table runs (training has ended): one line, rank 0
    requeues the job, and the requeued job finds the fit done and rates it again; its
    metrics.json holds the table's numbers."""
    job = [arg for arg in JOB if arg != "features.enabled=false"]
    submitted = subprocess.run(
        ["sbatch", "--parsable", f"--output={tmp_path}/slurm-%j.out", "--gpus-per-node=0",
         "--ntasks-per-node=1", "--cpus-per-task=1", "--mem=3G", "--time=10",
         "scripts/slurm.sbatch", *job, f"paths.log_dir={tmp_path}/logs"],
        cwd=ROOT, capture_output=True, text=True, check=True, env=ENV, timeout=60,
    )  # fmt: skip
    job_id = submitted.stdout.strip()
    log = tmp_path / "logs" / "train" / "runs" / f"slurm-{job_id}" / "train.log"
    rating = "rating the frozen"
    until(lambda: log.is_file() and rating in log.read_text(), "the table to start")
    subprocess.run(["scancel", "--signal", "USR1", job_id], check=True, timeout=30)
    release(job_id)
    until(lambda: state(job_id) == "", f"job {job_id} to end", seconds=600)
    console = (tmp_path / f"slurm-{job_id}.out").read_text()
    said = "stopped by SIGUSR1 during the end-of-run table"
    assert said in console and "SLURM requeues the job, which rates it again" in console
    metrics = json.loads((log.parent / "metrics.json").read_text())["metrics"]
    assert "features/linear_acc" in metrics and log.read_text().count(rating) == 2


@needs_submitit
def test_a_launcher_slurm_sweep_with_a_preempted_job_finishes_both(tmp_path, cluster):
    """launcher=slurm, 2 jobs (seed=1,2) as a SLURM array: job 0 gets submitit's notice
    (USR2) at step 2, saves last.ckpt, submitit requeues it and it resumes; job 1 runs
    through. Both finish, every step logged once, and the sweep's summary lists both."""
    sweep = tmp_path / "sweep"
    marker = tmp_path / "paused"
    Path(f"{marker}.1.0").touch()  # job 1 does not wait: its marker exists
    args = [
        "-m", "launcher=slurm", *JOB, "seed=1,2", f"paths.log_dir={tmp_path}/logs",
        f"hydra.sweep.dir={sweep}", "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=3", "hydra.launcher.timeout_min=10",
        *wait_at(2, Path(f"{marker}.${{hydra:job.num}}")),
    ]  # fmt: skip
    swept = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *args], cwd=tmp_path, env=ENV,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        until(lambda: Path(f"{marker}.0.0").exists(), "job 0 to reach step 2")
        (first,) = [j for j in jobs_queued_from(tmp_path) if j.endswith("_0")]
        preempt(first, "USR2", [Path(f"{marker}.0.0")])
        out, err = swept.communicate(timeout=600)
    finally:
        swept.kill()
        leave_the_queue(tmp_path)
    assert swept.returncode == 0, out[-2000:] + err[-3000:]
    log = (sweep / "0" / "train.log").read_text()
    # submitit logs the requeue once scontrol returns: SLURM's SIGTERM for it is ignored.
    assert "Requeued job" in log and "Exiting gracefully" in log, log[-3000:]
    assert f"resuming from {sweep}/0/checkpoints/last.ckpt" in log, log[-3000:]
    for number in (0, 1):
        with (sweep / str(number) / "csv" / "metrics.csv").open() as f:
            steps = [row["step"] for row in csv.DictReader(f) if row.get("train/loss_step")]
        assert len(steps) == len(set(steps)) == 16, (number, steps)
    with (sweep / "summary.csv").open() as f:
        rows = [(row["seed"], row["status"]) for row in csv.DictReader(f)]
    assert rows == [("1", "finished"), ("2", "finished")]


@needs_submitit
def test_a_job_slurm_refuses_is_one_line_and_leaves_nothing(tmp_path, cluster):
    """A request sbatch refuses (a partition that does not exist): SLURM's message in one
    line, exit 2, no sweep dir and nothing queued; submitit's traceback and its copy of the
    message stay off the console."""
    args = ["-m", "launcher=slurm", *JOB, "seed=1,2", f"paths.log_dir={tmp_path}/logs",
            "hydra.launcher.partition=no_such_partition", "hydra.launcher.cpus_per_task=1"]  # fmt: skip
    refused = run_cli("train.py", *args, cwd=tmp_path, env=ENV, timeout=120)
    assert refused.returncode == 2, refused.stderr[-3000:]
    lines = refused.stderr.strip().splitlines()
    assert [line for line in lines if "sbatch" in line] == [lines[-1]], lines
    assert lines[-1].startswith("error: SLURM refused the job") and "partition" in lines[-1]
    assert not list((tmp_path / "logs").rglob("*.*")) and jobs_queued_from(tmp_path) == []


def jobs_queued_from(directory: Path) -> list[str]:
    """The queued jobs submitted from `directory`: other tests' jobs share the cluster."""
    queue = subprocess.run(
        ["squeue", "--noheader", "--format", "%i %Z"], capture_output=True, text=True
    ).stdout
    return [job for job, workdir in (line.split(maxsplit=1) for line in queue.splitlines())
            if Path(workdir).is_relative_to(directory)]  # fmt: skip


def leave_the_queue(directory: Path) -> None:
    """Jobs submitted from `directory` cancelled and gone: submitit returns a job's result
    while SLURM still runs the job's last seconds."""
    if jobs := jobs_queued_from(directory):
        subprocess.run(["scancel", *jobs], timeout=30)
        until(lambda: not jobs_queued_from(directory), "the jobs to leave the queue", 120)
