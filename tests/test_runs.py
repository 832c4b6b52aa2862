"""The run tables part: the runs table (python -m trainlab.runs), status from each run
dir's own files, and a multirun's summary (summary.csv and summary.png)."""

import csv
import json
import os
import re
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from trainlab.runs.sweep_summary import SweepSummary
from trainlab.runs.table import main, read_or_damaged


def make_run(root, name, overrides, metrics=None, log="", last_ckpt=False, pruned=False):
    run = root / "runs" / name
    (run / "checkpoints").mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"starts": [{"time": "2026-11-23T10:00:00"}]}))
    (run / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (run / "train.log").write_text(log)
    if last_ckpt:
        (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    if metrics is not None:
        (run / "metrics.json").write_text(
            json.dumps(
                {
                    "metrics": metrics,
                    "optimized_metric": {"name": "val/acc", "value": metrics["val/acc"]},
                    "run": {"wall_seconds": 120.0},
                    "checkpoints": {"best": str(run / "checkpoints" / "best.ckpt")},
                    **({"pruned": {"epoch": 0}} if pruned else {}),
                }
            )
        )
    return run


@pytest.fixture
def runs(tmp_path):
    make_run(tmp_path, "a", ["seed=0", "model.optimizer.lr=0.1", "run_name=a"], {"val/acc": 0.5})
    make_run(tmp_path, "b", ["seed=0", "model.optimizer.lr=0.2", "run_name=b"], {"val/acc": 0.9})
    make_run(
        tmp_path,
        "c",
        ["seed=0", "model.optimizer.lr=0.3"],
        log="Traceback (most recent call last):\n",
    )
    make_run(tmp_path, "d", ["seed=0", "model.optimizer.lr=0.4"], log="epoch 1", last_ckpt=True)
    make_run(tmp_path, "e", ["seed=0", "model.optimizer.lr=0.5"])
    make_run(tmp_path, "f", ["seed=0", "model.optimizer.lr=0.6"], {"val/acc": 0.1}, pruned=True)
    resumed = "Traceback (most recent call last):\n[rank 0] resuming from last.ckpt\nepoch 2"
    make_run(tmp_path, "g", ["seed=0", "model.optimizer.lr=0.7"], log=resumed, last_ckpt=True)
    return tmp_path


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_the_csv_is_never_written_into_a_run_or_over_a_file_without_force(runs, tmp_path, capsys):
    """--csv into a run dir (its metrics.json, its checkpoint) or over an existing file is
    one line, exit 2, the file unchanged; --force replaces a file; a new folder is made, and
    said."""
    metrics = runs / "runs" / "a" / "metrics.json"
    kept = metrics.read_bytes()
    mine = tmp_path / "mine.csv"
    mine.write_text("my table")
    for path, says in [(metrics, "inside the run dir"), (mine, "--force"), (tmp_path, "directory")]:
        with pytest.raises(SystemExit) as stop:
            main([str(runs), "--csv", str(path)])
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and says in err and len(err.splitlines()) == 1, err
    assert metrics.read_bytes() == kept and mine.read_text() == "my table"
    main([str(runs), "--csv", str(mine), "--force"])
    assert rows(mine)
    capsys.readouterr()
    main([str(runs), "--csv", str(tmp_path / "new" / "folder" / "t.csv")])
    assert rows(tmp_path / "new" / "folder" / "t.csv")
    assert f"(made the folder {tmp_path / 'new'})" in capsys.readouterr().err  # said, not silent
    with pytest.raises(SystemExit) as stop:  # a file where a folder should be
        main([str(runs), "--csv", str(mine / "t.csv")])
    assert stop.value.code == 2 and "cannot write" in capsys.readouterr().err


def test_help_names_the_command_a_user_types_and_every_argument(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    usage = capsys.readouterr().out
    assert stop.value.code == 0 and usage.startswith("usage: python -m trainlab.runs ")
    for argument in ("roots", "--asc", "--sort SORT", "--csv CSV"):  # each with what it does
        assert re.search(rf"^  {argument} +\S", usage, re.MULTILINE), argument


def test_a_run_whose_lock_another_process_holds_is_running_and_stopped_once_it_dies(runs, tmp_path):
    """Run d left a last.ckpt ("stopped"); while a process holds its lock, as a training run
    does, it is "running"; once that process is killed, "stopped" again."""
    lock = runs / "runs" / "d" / ".lock"
    hold = "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
    hold += "f.write('4242'); f.flush(); print('held', flush=True); time.sleep(120)"
    holder = subprocess.Popen([sys.executable, "-c", hold, str(lock)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        main([str(runs), "--csv", str(tmp_path / "held.csv")])
    finally:
        holder.kill()
        holder.wait()
    main([str(runs), "--csv", str(tmp_path / "dead.csv")])
    status = {name: {r["run"].split("/")[-1]: r["status"] for r in rows(tmp_path / name)}["d"]
              for name in ("held.csv", "dead.csv")}  # fmt: skip
    assert status == {"held.csv": "running", "dead.csv": "stopped"}


@pytest.mark.timeout(60)  # opening a FIFO to write blocks until a reader comes: a hang
@pytest.mark.parametrize("force", [[], ["--force"]])
def test_the_csv_onto_a_fifo_or_a_folder_is_one_line_with_or_without_force(
    runs, tmp_path, capsys, force
):
    fifo = tmp_path / "table.csv"
    os.mkfifo(fifo)
    for path, says in [(fifo, "not a regular file"), (tmp_path, "is a directory")]:
        with pytest.raises(SystemExit) as stop:
            main([str(runs), "--csv", str(path), *force])
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and says in err and len(err.splitlines()) == 1, err
        assert "--force" not in err  # --force would not help


def test_status_overrides_and_checkpoint_of_each_run(runs, tmp_path, capsys):
    main([str(runs), "--csv", str(tmp_path / "t.csv")])
    # what a run has not got (run e: no metric, no checkpoint) reads "-"
    screen = capsys.readouterr().out
    (row_e,) = [line.split("│") for line in screen.splitlines() if "runs/e " in line]
    assert [cell.strip() for cell in row_e[4:7:2]] == ["-", "-"] and "None" not in screen
    table = {r["run"].split("/")[-1]: r for r in rows(tmp_path / "t.csv")}
    status = {name: r["status"] for name, r in table.items()}
    assert status == {
        "a": "finished",
        "b": "finished",
        "c": "failed",
        "d": "stopped",
        "e": "incomplete",
        "f": "pruned",
        "g": "stopped",  # failed once, resumed, stopped since
    }
    # Only the override that differs is a column; run_name names the run, seed is the same.
    assert (
        "model.optimizer.lr" in table["a"]
        and "seed" not in table["a"]
        and "run_name" not in table["a"]
    )
    assert table["b"]["optimized"] == "0.9" and table["b"]["minutes"] == "2.0"
    assert table["b"]["checkpoint"].endswith("runs/b/checkpoints/best.ckpt")
    assert table["d"]["checkpoint"].endswith("runs/d/checkpoints/last.ckpt")


def test_sort_and_filter_by_a_metric(runs, tmp_path):
    main([str(runs), "--sort", "val/acc", "--csv", str(tmp_path / "s.csv")])
    order = [r["run"].split("/")[-1] for r in rows(tmp_path / "s.csv")]
    assert order[:2] == ["b", "a"]  # best first; runs without the metric after
    main([str(runs), "--where", "val/acc>0.6", "--csv", str(tmp_path / "w.csv")])
    assert [r["run"].split("/")[-1] for r in rows(tmp_path / "w.csv")] == ["b"]
    main([str(runs), "--status", "failed", "stopped", "--csv", str(tmp_path / "f.csv")])
    assert sorted(r["status"] for r in rows(tmp_path / "f.csv")) == ["failed", "stopped", "stopped"]


def test_a_bool_a_sweep_wrote_and_one_typed_are_the_same_value(tmp_path):
    """Hydra writes a sweep job's bool as Python does (False), a command line keeps what was
    typed (false): the same setting, so no column, and one spelling where one is shown."""
    make_run(tmp_path, "typed", ["features.enabled=false", "seed=1"], {"val/acc": 0.5})
    make_run(tmp_path, "swept", ["features.enabled=False", "seed=2"], {"val/acc": 0.5})
    main([str(tmp_path), "--csv", str(tmp_path / "same.csv")])
    assert all("features.enabled" not in r for r in rows(tmp_path / "same.csv"))
    make_run(tmp_path, "other", ["features.enabled=TRUE", "seed=3"], {"val/acc": 0.5})
    main([str(tmp_path), "--csv", str(tmp_path / "t.csv")])
    values = {r["run"].split("/")[-1]: r["features.enabled"] for r in rows(tmp_path / "t.csv")}
    assert values == {"typed": "false", "swept": "false", "other": "true"}


@pytest.mark.parametrize(
    "args, message",
    [
        ([".", "--where", "val/acc about 0.5"], "write METRIC>VALUE"),
        ([".", "--where", "val/acc>high"], "is not a number"),
        ([".", "--status", "done"], "invalid choice"),
        (["nowhere"], "no such directory"),
    ],
)
def test_bad_arguments_are_one_line_errors(runs, monkeypatch, capsys, args, message):
    monkeypatch.chdir(runs)
    with pytest.raises(SystemExit) as exit:
        main(args)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)
)  # 9 ** 10 leaves from 1 KB


@pytest.mark.timeout(60)  # a FIFO blocks its reader until someone writes: a hang
def test_a_damaged_file_in_a_run_dir_is_its_row_and_the_table_goes_on(runs, tmp_path, capsys):
    """A truncated metrics.json, a planted alias bomb, a FIFO as overrides.yaml and one as
    config.yaml (a stopped run that cannot resume): each run is listed as damaged, saying
    why, and the others are listed as before."""
    truncated = make_run(runs, "h", ["seed=0"], {"val/acc": 0.2})
    (truncated / "metrics.json").write_text("")
    (make_run(runs, "i", ["seed=0"]) / "overrides.yaml").write_text(BILLION_LAUGHS)
    fifo = make_run(runs, "j", ["seed=0"]) / "overrides.yaml"
    fifo.unlink()
    os.mkfifo(fifo)
    assert "is a FIFO" in read_or_damaged(fifo.parent)["status"]
    stopped = make_run(runs, "k", ["seed=0"], last_ckpt=True)
    os.mkfifo(stopped / "config.yaml")
    main([str(runs), "--csv", str(tmp_path / "t.csv")])
    status = {r["run"].split("/")[-1]: r["status"] for r in rows(tmp_path / "t.csv")}
    assert status["h"].startswith("damaged: JSONDecodeError"), status
    assert status["i"].startswith("damaged: ConfigError"), status
    assert status["j"].startswith("damaged") and "is a FIFO" in status["j"], status
    assert status["k"].startswith("damaged: ValueError: config.yaml is a FIFO"), status
    assert status["a"] == "finished" and status["d"] == "stopped"


def test_a_sweep_summary_lists_every_job_with_the_refused_and_failed_ones(tmp_path, capsys):
    """Two finished jobs, one refused before it ran and one that failed (the checked
    sweeper's not_finished.json): a row each in summary.csv, the swept key a column, and
    the metric plotted against it."""
    sweep = tmp_path / "sweep"
    for job, lr, acc in (("0", "0.1", 0.5), ("1", "0.2", 0.9)):
        (sweep / job).mkdir(parents=True)
        (sweep / job / "overrides.yaml").write_text(f"- model.optimizer.lr={lr}\n- seed=0\n")
        metrics = {"optimized_metric": {"name": "val/acc", "value": acc}}
        (sweep / job / "metrics.json").write_text(json.dumps(metrics))
    (sweep / "2").mkdir()
    (sweep / "not_finished.json").write_text(json.dumps([
        {"job": "-", "overrides": ["model.optimizer.lr=-1", "seed=0"], "status": "refused",
         "reason": "model.optimizer.lr=-1: must be greater than 0"},
        {"job": "2", "overrides": ["model.optimizer.lr=0.3", "seed=0"], "status": "failed",
         "reason": "RuntimeError: boom"},
    ]))  # fmt: skip
    config = OmegaConf.create(
        {"hydra": {"sweep": {"dir": str(sweep)}}, "optimized_metric": "val/acc"}
    )
    SweepSummary().on_multirun_end(config)
    table = rows(sweep / "summary.csv")
    assert [(r["job"], r["model.optimizer.lr"], r["val/acc"]) for r in table] == [
        ("0", "0.1", "0.5"), ("1", "0.2", "0.9"), ("-", "-1", ""), ("2", "0.3", ""),
    ]  # fmt: skip
    assert [r["status"].split(":")[0] for r in table] == [
        "finished",
        "finished",
        "refused",
        "failed",
    ]
    assert "seed" not in table[0]  # the same in every job: not a column
    assert (sweep / "summary.png").stat().st_size > 1000
    assert "multirun summary" in capsys.readouterr().out
