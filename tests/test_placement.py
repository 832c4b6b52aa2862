"""Where a run lives (checks/placement.py), how a sweep checks its jobs, and what a refused
resume leaves: each refusal one line, exit 2, nothing written anywhere."""

import json
import os
from pathlib import Path

import pytest
from conftest import ROOT, run_cli, run_in_process

import trainlab.commands

JOB = ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
       "model.encoder.depth=1", "test=false", "features.enabled=false",
       "extras.print_config=false"]  # fmt: skip


def tree(folder):
    """Every path under ``folder`` with the bytes of each file: what "nothing written" means."""
    return {str(p): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def finished(run_dir):
    """A finished run as placement sees one: its markers (meta.json, metrics.json)."""
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "meta.json").write_text("{}\n")
    (run_dir / "metrics.json").write_text('{"metrics": {}}\n')
    return run_dir


PLACES = {  # case: (overrides given {root}, {logs}, {run}, {file}; words the line must hold)
    "'..' in run_name": (["run_name=../../../elsewhere/x"], "run_name=../../../elsewhere/x"),
    "'..' as task_name": (["task_name=.."], "task_name=.."),
    "an empty run_name": (["run_name="], "run_name is empty"),
    "an absolute run_name": (["run_name={root}/elsewhere/x"], "is an absolute path"),
    "inside a finished run": (["run_name=a/b/deeper/c"], "inside the run dir {run}"),
    "above a finished run": (["run_name=a"], "above the run dir {run}"),
    "hydra.run.dir into a run": (["hydra.run.dir={run}/checkpoints"], "inside the run dir {run}"),
    "run_name leaving the root by a link": (["run_name=out/x"], "not inside paths.log_dir"),
    "hydra.sweep.dir into a run": (["-m", "seed=1,2", "hydra.sweep.dir={run}/sweep"], "inside the run dir {run}"),
    "paths.log_dir on a file": (["paths.log_dir={file}"], "is a file"),
    # the log root itself in a run: named as the key at fault, not run_name
    "paths.log_dir a link into a run": (["paths.log_dir={root}/into_run"], "paths.log_dir={root}/into_run lies in the run dir {run}"),
    "paths.log_dir through a run and ..": (["paths.log_dir={run}/../b/sub"], "lies in the run dir {run}"),
    "a run_name past the path limit": (["run_name=" + "/".join(["a" * 200] * 25)], "choose a shorter run_name"),
    # each job's own dir, not only the sweep's: checked for every job before the first runs
    "hydra.sweep.subdir into a run": (["-m", "seed=1,2", "hydra.sweep.subdir=../../runs/a/b/checkpoints"], "inside the run dir {run}"),
    "hydra.sweep.subdir outside": (["-m", "seed=1,2", "hydra.sweep.subdir={root}/elsewhere"], "outside its sweep dir"),
    "hydra.sweep.subdir one for all": (["-m", "seed=1,2", "hydra.sweep.subdir=same"], "gives jobs 0 and 1 one dir"),
}  # fmt: skip


@pytest.mark.parametrize("case", PLACES)
def test_a_run_outside_its_root_or_around_another_run_is_refused_and_writes_nothing(
    tmp_path, monkeypatch, capfd, case
):
    logs = tmp_path / "logs"
    run = finished(logs / "train" / "runs" / "a" / "b")
    (tmp_path / "file").write_text("not a folder\n")
    (tmp_path / "outside").mkdir()
    (logs / "train" / "runs" / "out").symlink_to(tmp_path / "outside", target_is_directory=True)
    (tmp_path / "into_run").symlink_to(run, target_is_directory=True)
    overrides, words = PLACES[case]
    fill = {"root": tmp_path, "logs": logs, "run": run, "file": tmp_path / "file"}
    before = tree(tmp_path)
    flags = [o for o in overrides if o == "-m"]  # before the overrides, as Hydra's CLI asks
    given = [o.format(**fill) for o in overrides if o != "-m"]
    argv = ["train.py", *flags, f"paths.log_dir={logs}", *JOB, *given]
    capfd.readouterr()
    assert run_in_process(trainlab.commands.train_command, argv, monkeypatch) == 2
    err = capfd.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    assert words.format(**fill) in lines[0]
    assert tree(tmp_path) == before  # nothing written anywhere, the finished run unchanged


def test_a_run_dir_given_on_the_command_line_may_lie_outside_the_log_root(tmp_path, monkeypatch):
    """hydra.run.dir is the user's own choice of place: only other runs are off limits."""
    argv = ["train.py", "trainer.fast_dev_run=true", f"hydra.run.dir={tmp_path / 'run'}",
            f"paths.log_dir={tmp_path / 'logs'}", "extras.print_config=false"]  # fmt: skip
    assert run_in_process(trainlab.commands.train_command, argv, monkeypatch) == 0
    assert (tmp_path / "run" / "meta.json").is_file()


def test_nested_run_names_work_and_their_resume_hint_names_the_whole_name(tmp_path):
    from omegaconf import OmegaConf

    from trainlab.run.run_dir import continue_command

    cfg = OmegaConf.create({"paths": {"log_dir": str(tmp_path)}, "task_name": "train",
                            "run_name": "a/b"})  # fmt: skip
    assert continue_command(cfg, tmp_path / "train" / "runs" / "a" / "b") == (
        "run_name=a/b resume=true"
    )
    job = tmp_path / "train" / "multiruns" / "t" / "0"
    assert continue_command(cfg, job) == f"hydra.run.dir={job} resume=true"


SWEEP = ["-m", "model.optimizer.lr=1e-3,-1", "seed=1,2"]


def test_a_sweep_with_one_bad_job_runs_none(tmp_path):
    """Job 2 is refused before any job runs. Jobs 0 and 1, checked before it, both warm up
    past their one epoch: the warning is said once."""
    logs = tmp_path / "logs"
    done = run_cli("train.py", *SWEEP, f"paths.log_dir={logs}", *JOB, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: job 2 of 4 (model.optimizer.lr=-1 seed=1)"), line
    assert not logs.exists()  # no job ran, no sweep dir
    assert done.stdout.count("model.warmup_epochs=2 is not below trainer.max_epochs=1") == 1


@pytest.mark.slow  # two jobs train: make test-slow
def test_a_sweep_asked_to_keep_going_runs_the_valid_jobs_and_lists_the_others(tmp_path):
    logs = tmp_path / "logs"
    done = run_cli("train.py", *SWEEP, f"paths.log_dir={logs}", *JOB,
                   "hydra.sweeper.keep_going=true", cwd=tmp_path)  # fmt: skip
    # the sweep as a whole did not succeed: exit 2 (refused jobs only), and a line says so
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: 0 job(s) failed and 2 were refused of 4" in done.stderr.splitlines()[-1]
    (sweep_dir,) = (logs / "train" / "multiruns").iterdir()
    assert sorted(p.parent.name for p in sweep_dir.glob("*/metrics.json")) == ["0", "1"]
    not_finished = json.loads((sweep_dir / "not_finished.json").read_text())
    assert [e["status"] for e in not_finished] == ["refused"] * 2
    assert all(e["reason"].startswith("model.optimizer.lr=-1 is not valid") for e in not_finished)


@pytest.mark.slow  # a run, then a refused resume in a subprocess (16 s each): make test-slow
@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_resume_from_an_unreadable_checkpoint_is_one_line_and_changes_nothing(tmp_path, damage):
    logs = tmp_path / "logs"
    done = run_cli("train.py", *JOB, f"paths.log_dir={logs}", "run_name=r", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    run = logs / "train" / "runs" / "r"
    (run / "metrics.json").unlink()  # a run stopped before its end
    last = run / "checkpoints" / "last.ckpt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"")
    before = tree(run)
    done = run_cli("train.py", *JOB, f"paths.log_dir={logs}", "run_name=r", "resume=true",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"cannot read checkpoint {last}" in errors[0]
    assert "Traceback" not in done.stderr
    assert tree(run) == before  # no resumes.txt, no start in meta.json, no train.log line


@pytest.mark.slow  # two runs and three refused starts in subprocesses: make test-slow
def test_a_resume_from_weights_of_another_model_is_one_line_and_changes_nothing(tmp_path):
    """resume_from a ResNet's checkpoint into the default job's ViT, and resume=true over a last.ckpt
    replaced by it: each one line naming the key, exit 2, before any file of the run changes
    (Lightning's strict load failed later, after the CSV was cut back and meta.json had a
    new start)."""
    logs = tmp_path / "logs"
    resnet = ["experiment=vicreg_digits_resnet", *(o for o in JOB if "encoder" not in o)]
    for name, job in (("foreign", resnet), ("r", JOB)):
        done = run_cli("train.py", *job, f"paths.log_dir={logs}", f"run_name={name}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
    foreign = logs / "train" / "runs" / "foreign" / "checkpoints" / "last.ckpt"
    run = logs / "train" / "runs" / "r"
    (run / "metrics.json").unlink()  # a run stopped before its end
    own = (run / "checkpoints" / "last.ckpt").read_bytes()
    cases = [
        (["run_name=new", f"resume_from={foreign}"], f"resume_from={foreign}", "unexpected"),
        (["run_name=r", "resume=true"], "resume=true", "unexpected"),  # last.ckpt replaced
    ]
    for i, (args, key, says) in enumerate(cases):
        if i == 1:
            (run / "checkpoints" / "last.ckpt").write_bytes(foreign.read_bytes())
        before = tree(run)
        done = run_cli("train.py", *JOB, f"paths.log_dir={logs}", *args, cwd=tmp_path)
        assert done.returncode == 2, done.stderr[-2000:]
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and key in errors[0] and says in errors[0], errors
        assert "do not fit this model" in errors[0] and "Traceback" not in done.stderr
        assert tree(run) == before
    assert not (logs / "train" / "runs" / "new").exists()
    assert own != foreign.read_bytes()


@pytest.mark.slow  # a run, then refused resumes in subprocesses: make test-slow
def test_a_resume_without_the_runs_config_is_one_line_and_changes_nothing(tmp_path):
    """resume=true compares the command line with the run's config.yaml and keeps it: with
    the file missing or a FIFO, one line, exit 2, nothing of the run changed (a new
    config.yaml was written, or the check was skipped)."""
    logs = tmp_path / "logs"
    done = run_cli("train.py", *JOB, f"paths.log_dir={logs}", "run_name=r", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    run = logs / "train" / "runs" / "r"
    (run / "metrics.json").unlink()  # a run stopped before its end
    saved = run / "config.yaml"
    for damage, says in ((Path.unlink, "does not exist"), (os.mkfifo, "is a FIFO")):
        saved.unlink(missing_ok=True)
        if damage is os.mkfifo:
            os.mkfifo(saved)
        before = tree(run)
        done = run_cli("train.py", *JOB, f"paths.log_dir={logs}", "run_name=r", "resume=true",
                       "seed=7", cwd=tmp_path)  # fmt: skip
        assert done.returncode == 2, done.stderr[-2000:]
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and f"resume=true: {saved} {says}" in errors[0], errors
        assert "resume_from=" in errors[0] and tree(run) == before


def test_every_resolver_configs_use_may_be_read_from_disk():
    """A run dir's config.yaml holds configs/' own interpolations: each must pass the judge."""
    from trainlab.checks.allowed_targets import DISK_RESOLVERS, resolvers_in

    used = {
        name
        for path in (ROOT / "configs").rglob("*.yaml")
        for line in path.read_text().splitlines()
        if "${" in line and not line.lstrip().startswith("#")
        for name in resolvers_in(line.split(":", 1)[1].split(" #")[0].strip().strip("'\""))
    }
    assert used and used <= DISK_RESOLVERS, used - DISK_RESOLVERS


def refuse_without_torch(tmp_path, script: str, *args: str) -> list[str]:
    """``python <script> <args>`` as a user runs it: its stderr lines, the last of which says
    whether torch was imported by the time it exited (exit 2 asserted)."""
    code = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('torch' in sys.modules, file=sys.stderr))\n"
        f"sys.argv = [{script!r}, *{list(args)!r}]\n"
        f"runpy.run_path({str(ROOT / script)!r}, run_name='__main__')\n"
    )
    probe = tmp_path / "probe.py"
    probe.write_text(code)
    done = run_cli(str(probe), cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    return done.stderr.strip().splitlines()


def test_a_refusal_under_an_experiment_imports_no_torch(tmp_path):
    """What needs no signature (the command line's types, RANGES) is refused before torch
    under an experiment too; a value against its class's signature after the import, still
    before the run dir."""
    lines = refuse_without_torch(
        tmp_path, "train.py", "experiment=vicreg_mnist", "model.optimizer.lr=-1"
    )
    assert lines[0].startswith("error: model.optimizer.lr=-1") and lines[-1] == "False", lines
    lines = refuse_without_torch(
        tmp_path, "train.py", "experiment=vicreg_mnist", "model.invariance=-1"
    )
    assert lines[0].startswith("error: model.invariance=-1") and lines[-1] == "True", lines
    assert not (tmp_path / "logs" / "train" / "runs").exists()


def test_eval_refuses_a_planted_run_config_before_importing_torch(tmp_path):
    """The judge reads config.yaml as text: no torch, no victim, no eval run dir."""
    run = tmp_path / "shared"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"never read: refused before")
    victim = tmp_path / "victim.txt"
    (run / "config.yaml").write_text(
        "data:\n  _target_: trainlab.data.digits.DigitsDataModule\n"
        f"  extra: \"${{oc.create:{{_target_: builtins.open, _args_: ['{victim}', w]}}}}\"\n"
    )
    lines = refuse_without_torch(
        tmp_path, "eval.py", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
        f"paths.log_dir={tmp_path / 'logs'}",
    )  # fmt: skip
    assert lines[0].startswith("error: ") and "data.extra" in lines[0] and "oc.create" in lines[0]
    assert lines[-1] == "False" and len(lines) == 2, lines
    assert not victim.exists() and not list((tmp_path / "logs").glob("*/runs/*"))


def test_a_crashed_runs_name_is_refused_without_resume_and_nothing_of_it_changes(
    tmp_path, monkeypatch, capfd
):
    """A run killed before its first checkpoint leaves its record and logs, no metrics.json
    and no checkpoints/: its name is still a run's, refused without resume=true."""
    logs = tmp_path / "logs"
    crashed = logs / "train" / "runs" / "crashed"
    crashed.mkdir(parents=True)
    for name, text in [("meta.json", "{}\n"), ("config.yaml", "seed: 1\n"),
                       ("overrides.yaml", "[]\n"), ("train.log", "step 3\n"),
                       ("metrics.csv", "step,train/loss\n0,1.0\n")]:  # fmt: skip
        (crashed / name).write_text(text)
    before = tree(tmp_path)
    argv = ["train.py", f"paths.log_dir={logs}", *JOB, "run_name=crashed"]
    capfd.readouterr()
    assert run_in_process(trainlab.commands.train_command, argv, monkeypatch) == 2
    (line,) = capfd.readouterr().err.strip().splitlines()
    assert "already holds a run (meta.json)" in line and "resume=true" in line, line
    assert tree(tmp_path) == before
