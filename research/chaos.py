"""Kill a random rank of a 2-process CPU job at a random moment, M times; does it finish,
and does it end exactly where an uninterrupted run ends?

    python research/chaos.py --runs 10 --out research/chaos.md
    python research/chaos.py --runs 1 --kill-when step000004.ckpt --set trainer.max_epochs=2 \
        --reference RUN_DIR --json /tmp/chaos.json                # what the test runs

Every job is scripts/torchrun.sh (2 CPU ranks, --max-restarts) with resume=true and a step
checkpoint every 2 optimizer steps, as a user would run a long job. One SIGKILL per run, to
one worker chosen at random, at a moment drawn uniformly over the uninterrupted run's wall
time; torchrun then restarts both ranks, which continue from the newest checkpoint.
Compared with the uninterrupted run: every logged train/loss step and metrics.json. The
uninterrupted run may be given (``--reference``): a DDP job's numbers depend on its world
size and thread count (one a process, as torchrun sets), not on what launched it.
"""

import argparse
import csv
import datetime
import json
import os
import platform
import random
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = [
    "trainer.accelerator=cpu",
    "trainer.max_epochs=3",
    "trainer.limit_train_batches=8",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.log_every_n_steps=1",
    "model.encoder.depth=2",
    "callbacks=[default,step_checkpoints]",
    "callbacks.step_checkpoints.every_n_train_steps=2",
    "callbacks.step_checkpoints.save_top_k=2",
    "extras.print_config=false",
    "resume=true",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workers(agent_pid: int) -> list[int]:
    """The torchrun agent's child processes: one per rank."""
    try:
        return [
            int(p) for p in Path(f"/proc/{agent_pid}/task/{agent_pid}/children").read_text().split()
        ]
    except OSError:
        return []


def launch(log_dir: Path, name: str, max_restarts: int, extra: list[str]) -> subprocess.Popen:
    env = {
        **os.environ,
        "NPROC_PER_NODE": "2",
        "MASTER_PORT": str(free_port()),
        "MAX_RESTARTS": str(max_restarts),
        "PYTHON": sys.executable,
        "WANDB_MODE": "offline",
    }
    command = [
        str(ROOT / "scripts" / "torchrun.sh"),
        *JOB,
        *extra,
        f"paths.log_dir={log_dir}",
        f"run_name={name}",
    ]
    log = open(log_dir / f"{name}.log", "w")
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def outcome(run_dir: Path, returncode: int) -> dict:
    losses = {}
    if (run_dir / "csv" / "metrics.csv").exists():
        with (run_dir / "csv" / "metrics.csv").open() as f:
            # a step logged twice (after a restart) keeps its last value
            losses = {
                r["step"]: r["train/loss_step"]
                for r in csv.DictReader(f)
                if r.get("train/loss_step")
            }
    metrics_json = run_dir / "metrics.json"
    metrics = json.loads(metrics_json.read_text())["metrics"] if metrics_json.exists() else None
    return {
        "returncode": returncode,
        "losses": losses,
        # The final evaluation. (A run resumed after its last epoch fits nothing more, so
        # its metrics.json holds no train/val values to compare.)
        "metrics": {k: v for k, v in metrics.items() if k.startswith("test/")} if metrics else None,
    }


def chaos_run(
    log_dir: Path,
    name: str,
    kill_at: float,
    rng: random.Random,
    limit: float,
    when: str | None,
    extra: list[str],
) -> dict:
    """One run, one SIGKILL: after kill_at seconds, or once checkpoints/<when> exists."""
    proc = launch(log_dir, name, max_restarts=3, extra=extra)
    start = time.monotonic()
    killed = None
    trigger = log_dir / "train" / "runs" / name / "checkpoints" / when if when else None
    while proc.poll() is None:
        now = time.monotonic() - start
        due = trigger.exists() if trigger else now >= kill_at
        if killed is None and due and (pids := workers(proc.pid)):
            rank = rng.randrange(len(pids))
            os.kill(pids[rank], signal.SIGKILL)
            killed = {"local_rank_index": rank, "after_s": round(now, 1)}
        if now > limit:
            proc.kill()
            break
        time.sleep(0.05)
    result = outcome(log_dir / "train" / "runs" / name, proc.wait())
    result["restarts"] = (log_dir / f"{name}.log").read_text().count("failed (exitcode:")
    result["killed"] = killed
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="M: runs, one SIGKILL each")
    parser.add_argument("--seed", type=int, default=0, help="draws the moments and ranks")
    parser.add_argument("--out", type=Path, help="write a markdown report here")
    parser.add_argument("--json", type=Path, help="write the per-run outcomes here")
    parser.add_argument("--kill-when", help="kill once checkpoints/<this> exists (not at random)")
    parser.add_argument("--log-dir", type=Path, help="keep the runs here (default: a temp dir)")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE for every run")
    parser.add_argument(
        "--reference",
        type=Path,
        help="a finished run dir of the same job, compared with instead of running one",
    )
    args = parser.parse_args()
    if args.reference and not args.kill_when:
        parser.error(
            "--reference needs --kill-when: a finished run gives no wall time to draw over"
        )
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = args.log_dir or Path(tmp)
        log_dir.mkdir(parents=True, exist_ok=True)
        if args.reference:
            reference, ref_seconds = outcome(args.reference, 0), None
        else:
            t0 = time.monotonic()
            ref_proc = launch(log_dir, "reference", max_restarts=0, extra=args.set)
            reference = outcome(log_dir / "train" / "runs" / "reference", ref_proc.wait())
            ref_seconds = time.monotonic() - t0
        if args.reference and not reference["losses"]:
            sys.exit(f"the given uninterrupted run logged no losses: {args.reference}")
        if reference["returncode"] or not reference["losses"]:
            sys.exit(
                f"the uninterrupted run failed: see {log_dir}/reference.log\n"
                + (log_dir / "reference.log").read_text()[-3000:]
            )
        took = f"{ref_seconds:.0f} s" if ref_seconds else f"given, {args.reference}"
        print(f"uninterrupted run: {took}, {len(reference['losses'])} steps", flush=True)
        runs = []
        for i in range(args.runs):
            kill_at = rng.uniform(0, ref_seconds or 0)
            limit = 10 * ref_seconds + 120 if ref_seconds else 900
            r = chaos_run(log_dir, f"chaos{i}", kill_at, rng, limit, args.kill_when, args.set)
            r["finished"] = r["returncode"] == 0 and r["metrics"] is not None
            r["losses_match"] = r["losses"] == reference["losses"]
            r["metrics_match"] = r["metrics"] == reference["metrics"]
            runs.append(r)
            print(
                f"run {i}: killed {r['killed']}, restarts {r['restarts']}, finished {r['finished']}, "
                f"losses match {r['losses_match']}, metrics match {r['metrics_match']}",
                flush=True,
            )
            if not r["finished"]:
                print((log_dir / f"chaos{i}.log").read_text()[-3000:], file=sys.stderr)
    summary = {
        "runs": len(runs),
        "finished": sum(r["finished"] for r in runs),
        "losses_match": sum(r["losses_match"] for r in runs),
        "metrics_match": sum(r["metrics_match"] for r in runs),
        "reference_seconds": ref_seconds and round(ref_seconds, 1),
    }
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": runs}, indent=1))
    if args.out:
        rows = "\n".join(
            f"| {i} | {r['killed']['after_s'] if r['killed'] else 'not killed (ended first)'} | "
            f"{r['killed']['local_rank_index'] if r['killed'] else '-'} | {r['restarts']} | "
            f"{'yes' if r['finished'] else 'NO'} | {'yes' if r['losses_match'] else 'NO'} | "
            f"{'yes' if r['metrics_match'] else 'NO'} |"
            for i, r in enumerate(runs)
        )
        args.out.write_text(f"""# Chaos: killed ranks, restarted by torchrun, resumed from checkpoints

Written by `python research/chaos.py {shlex.join(sys.argv[1:])}` on {datetime.date.today()}
({platform.machine()}, {os.cpu_count()} cores, no GPU). Job: the default I-JEPA digits
experiment on 2 CPU ranks (gloo) under `scripts/torchrun.sh` with `MAX_RESTARTS=3`,
`resume=true`, a step checkpoint every 2 optimizer steps; overrides `{" ".join(JOB + args.set)}`.
Each run: one SIGKILL to a random worker at a moment drawn uniformly over the uninterrupted
run's wall time ({took}). "Losses match": every logged per-step train/loss
equals the uninterrupted run's, bitwise; "metrics match": the test metrics in metrics.json
are equal.

**{summary["finished"]}/{summary["runs"]} finished; {summary["losses_match"]}/{summary["runs"]} with identical losses;
{summary["metrics_match"]}/{summary["runs"]} with identical final metrics.**

| run | killed after (s) | worker | restarts | finished | losses match | metrics match |
|---|---|---|---|---|---|---|
{rows}
""")
    sys.exit(0 if summary["finished"] == summary["runs"] else 1)


if __name__ == "__main__":
    main()
