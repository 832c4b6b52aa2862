"""Which of forty runs was best: a table of run dirs, read from their own files only.

    python -m trainlab.runs                       # every run under logs/
    python -m trainlab.runs logs/train --sort val/probe_acc --where "val/probe_acc>0.5"
    python -m trainlab.runs logs/train --metrics test/acc val/loss --csv runs.csv

A run dir is any folder with the ``meta.json`` that train.py and eval.py write at start. Its
status comes from what the run left behind, so the table works offline, on a shared file
system and without W&B:
- running: another process holds the run dir's lock (run/run_dir.py), which the kernel drops
  when that process ends, however it ends;
- finished: ``metrics.json`` (written at the very end);
- pruned: a metrics.json that says so (an Optuna trial its pruner stopped early);
- failed: no metrics.json, and ``train.log`` holds a traceback (run_task writes it there);
- stopped: neither, but a ``checkpoints/last.ckpt`` to continue from (``resume=true``);
- incomplete: none of these (killed before its first checkpoint);
- damaged: a file the table reads (meta.json, metrics.json) does not parse, or a run file is
  there but not a regular file (a FIFO as config.yaml); the row says why.
"""

import argparse
import csv
import json
import operator
import re
import sys
from datetime import datetime
from pathlib import Path

from trainlab.run.run_dir import check_output, lock_holder
from trainlab.runs.sweep_summary import read_overrides, swept_keys
from trainlab.utils.console import print_jobs
from trainlab.utils.errors import ConfigError, UserError
from trainlab.utils.files import not_a_file

STATUSES = ("running", "finished", "pruned", "failed", "stopped", "incomplete", "damaged")
OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "=": operator.eq}


def fail(message: str):
    """A user's mistake: one line on stderr, exit 2 (as train.py and eval.py do)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


RESUMED = "resuming from "  # what train.py logs when resume=true finds a checkpoint


def status(run_dir: Path) -> str:
    if lock_holder(run_dir) is not None:
        return "running"
    if (run_dir / "metrics.json").is_file():
        return (
            "pruned"
            if "pruned" in json.loads((run_dir / "metrics.json").read_text())
            else "finished"
        )
    log = run_dir / "train.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    attempt = text[max(text.rfind(RESUMED), 0) :]  # a failure that a resume followed is past
    if "Traceback (most recent call last)" in attempt:
        return "failed"
    if (run_dir / "checkpoints" / "last.ckpt").is_file():
        return "stopped"
    return "incomplete"


def read_run(run_dir: Path) -> dict:
    """One row: status, overrides, metrics, wall time and the checkpoint to use."""
    # a FIFO would block the table; a config.yaml that is none cannot be resumed or rated
    for name in ("meta.json", "metrics.json", "train.log", "config.yaml"):
        path = run_dir / name
        if (path.exists() or name == "meta.json") and (what := not_a_file(path)):
            raise ValueError(f"{name} {what}")
    meta = json.loads((run_dir / "meta.json").read_text())
    results = {}
    if (run_dir / "metrics.json").is_file():
        results = json.loads((run_dir / "metrics.json").read_text())
    run = {
        "run": str(run_dir),
        "status": status(run_dir),
        "overrides": read_overrides(run_dir),
        "metrics": results.get("metrics", {}),
        "optimized": results.get("optimized_metric") or {},
        "minutes": None,
        "checkpoint": None,
    }
    if "run" in results:
        run["minutes"] = results["run"]["wall_seconds"] / 60
    elif meta.get("starts"):  # unfinished: from its first start to its log's last write
        start = datetime.fromisoformat(meta["starts"][0]["time"]).timestamp()
        log = run_dir / "train.log"
        if log.is_file():
            run["minutes"] = max(0.0, log.stat().st_mtime - start) / 60
    checkpoints = results.get("checkpoints") or {}
    best = checkpoints.get("best") or checkpoints.get("last")
    if best is None and (run_dir / "checkpoints" / "last.ckpt").is_file():
        best = str(run_dir / "checkpoints" / "last.ckpt")
    run["checkpoint"] = best
    return run


def read_or_damaged(run_dir: Path) -> dict:
    """``read_run``, or a row that says why the run dir cannot be read (a truncated file)."""
    try:
        return read_run(run_dir)
    # JSONDecodeError is a ValueError; a ConfigError, an overrides.yaml too large or aliased
    except (OSError, ValueError, KeyError, TypeError, ConfigError) as e:
        # the run's own path left out: the row names it, and the file is what matters
        why = f"{type(e).__name__}: {e}".replace(f"{run_dir}/", "").splitlines()[0][:80]
        return {"run": str(run_dir), "status": f"damaged: {why}", "overrides": {},
                "metrics": {}, "optimized": {}, "minutes": None, "checkpoint": None}  # fmt: skip


def find_runs(roots: list[Path]) -> list[dict]:
    dirs = sorted({p.parent for root in roots for p in root.rglob("meta.json")})
    return [read_or_damaged(d) for d in dirs]


def parse_where(expression: str):
    """``"val/acc>0.5"`` -> (metric, operator, 0.5)."""
    match = re.fullmatch(r"\s*([^<>=\s]+)\s*(>=|<=|>|<|=)\s*(\S+)\s*", expression)
    if match is None:
        fail(f"--where {expression!r}: write METRIC>VALUE (or >=, <, <=, =)")
    name, op, value = match.groups()
    try:
        return name, OPS[op], float(value)
    except ValueError:
        fail(f"--where {expression!r}: {value!r} is not a number")


def metric_of(run: dict, name: str):
    return run["optimized"].get("value") if name == "optimized" else run["metrics"].get(name)


def table(runs: list[dict], metrics: list[str], short: bool) -> tuple[list[str], list[list]]:
    """(header, rows): the run, its status, the overrides that differ, metrics, minutes, ckpt.
    ``short``: the run dir's last two parts and the checkpoint's name (for the screen)."""
    keys = swept_keys(runs) if len(runs) > 1 else []
    header = ["run", "status", *keys, *metrics, "minutes", "checkpoint"]
    rows = []
    for run in runs:
        name, ckpt = run["run"], run["checkpoint"]
        if short:
            name, ckpt = "/".join(Path(name).parts[-2:]), ckpt and Path(ckpt).name
        rows.append(
            [
                name,
                run["status"],
                *(run["overrides"].get(k, "-") for k in keys),
                *(metric_of(run, m) for m in metrics),
                run["minutes"],
                ckpt,
            ]
        )
    return header, rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m trainlab.runs", description=__doc__.splitlines()[0]
    )
    parser.error = fail  # one line, not argparse's usage block: --help shows the usage
    parser.add_argument(
        "roots", nargs="*", type=Path, default=[Path("logs")], help="folders of runs (logs)"
    )
    parser.add_argument(
        "--metrics", nargs="*", default=["optimized"], help="columns; 'optimized': each run's own"
    )
    parser.add_argument("--sort", help="a metric: best first (highest, or lowest with --asc)")
    parser.add_argument("--asc", action="store_true", help="--sort lowest first")
    parser.add_argument("--where", action="append", default=[], help='e.g. "val/acc>0.5"')
    parser.add_argument("--status", nargs="*", choices=STATUSES, help="keep only these")
    parser.add_argument("--csv", type=Path, help="also write the table here (outside run dirs)")
    parser.add_argument("--force", action="store_true", help="replace an existing --csv file")
    args = parser.parse_args(argv)
    missing = [str(r) for r in args.roots if not r.is_dir()]
    if missing:
        fail(f"no such directory: {', '.join(missing)}")
    if args.csv:  # before the table: a refused write reads nothing
        try:
            check_output(args.csv, args.force)
        except UserError as error:
            fail(f"--csv {error}")
    runs = find_runs(args.roots)
    for name, op, value in map(parse_where, args.where):
        runs = [r for r in runs if metric_of(r, name) is not None and op(metric_of(r, name), value)]
    if args.status:
        runs = [r for r in runs if r["status"].split(":")[0] in args.status]
    metrics = list(dict.fromkeys(args.metrics + ([args.sort] if args.sort else [])))
    if args.sort:  # runs without the metric go last
        valued = [r for r in runs if metric_of(r, args.sort) is not None]
        valued.sort(key=lambda r: metric_of(r, args.sort), reverse=not args.asc)
        runs = valued + [r for r in runs if metric_of(r, args.sort) is None]
    print_jobs(
        f"{len(runs)} runs under {', '.join(map(str, args.roots))}", *table(runs, metrics, True)
    )
    if args.csv:
        header, rows = table(runs, metrics, short=False)
        made = next((p for p in reversed(args.csv.parents) if not p.exists()), None)
        try:
            args.csv.parent.mkdir(parents=True, exist_ok=True)
            with open(args.csv, "w", newline="") as f:
                csv.writer(f).writerows([header, *rows])
        except OSError as error:
            fail(f"--csv {args.csv}: cannot write it ({error.strerror}): choose another path")
        print(
            f"written {args.csv}" + (f" (made the folder {made})" if made else ""), file=sys.stderr
        )
