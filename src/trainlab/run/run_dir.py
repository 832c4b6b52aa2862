"""The run directory: refuses to overwrite one, and records what made the run.

Each run dir keeps the composed config, the command-line overrides, the git commit (and
the diff when the tree is dirty), installed package versions and host facts, so a result
can be traced back to exactly what produced it.
"""

import fcntl
import json
import logging
import logging.handlers
import os
import platform
import socket
import subprocess
import sys
from datetime import datetime
from importlib import metadata
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from trainlab.utils.errors import UserError
from trainlab.utils.files import not_a_file

RESULT_FILES = ("metrics.json", "checkpoints")
RUN_MARKER = "meta.json"  # every run writes it at start: a folder holding it is a run dir
LOCK_FILE = ".lock"
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")  # Lightning's order
_held_lock = None  # this process's open lock file: the run dir it writes, held until the run ends
_HELD, _RUN_LOG = "trainlab-held-records", "trainlab-run-log"  # names of our log handlers
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's


def is_global_zero() -> bool:
    """Rank 0 of the whole job, known before the Trainer exists (Lightning, torchrun, SLURM),
    and before Lightning is imported: its rank then comes from the launcher's variables, read
    as Lightning reads them."""
    from lightning_utilities.core.rank_zero import rank_zero_only

    rank = getattr(rank_zero_only, "rank", None)
    if rank is None:
        rank = next((int(os.environ[k]) for k in RANK_VARIABLES if os.environ.get(k)), 0)
    return rank == 0


def guard(run_dir: Path, resume: bool = False) -> None:
    """Refuse to start a new run in a dir that already holds a run (its results, or only the
    meta.json every run writes at start), and to resume one that has finished: its
    metrics.json, checkpoints and pictures stay as they are; and first, to touch a dir that
    another process is writing."""
    refuse_if_locked(run_dir)
    # Any run's files make it a run: one killed before its first checkpoint has its
    # meta.json and logs, and a new run there would replace its record and append to its logs.
    taken = [name for name in (*RESULT_FILES, RUN_MARKER) if (run_dir / name).exists()]
    if taken and not resume:
        raise UserError(
            f"run dir {run_dir} already holds a run ({', '.join(taken)}): "
            f"pick another run_name, or pass resume=true to continue it"
        )
    if resume and (run_dir / "metrics.json").exists():
        raise UserError(
            f"run dir {run_dir} holds a finished run (metrics.json), which resume=true would "
            f"overwrite: to train it further, start a new run from its last checkpoint with "
            f"resume_from={run_dir / 'checkpoints' / 'last.ckpt'} run_name=<a new name>"
        )
    saved = run_dir / "config.yaml"
    if resume and (last := resume_checkpoint(run_dir)) and (what := not_a_file(saved)):
        # the run's own config is what a resume is checked against, and what it keeps
        raise UserError(
            f"resume=true: {saved} {what}, so the run's config cannot be checked: put the "
            f"run's config.yaml back, or start a new run from its checkpoint with "
            f"resume_from={last} run_name=<a new name>"
        )


def owning_run(path: Path, own: Path | None = None) -> Path | None:
    """The run dir that holds ``path`` (the nearest folder at or above it with the meta.json
    every run writes at start), unless that is ``own``."""
    own = own.resolve() if own is not None else None
    for folder in (path.resolve(), *path.resolve().parents):
        if folder == own:
            return None
        if (folder / RUN_MARKER).is_file():
            return folder
    return None


def check_output(out: Path, force: bool) -> None:
    """A tool's output file (an export, a table): never inside a run dir (only its run
    writes there), never onto anything but a regular file (a FIFO would block the writer),
    never over an existing file unless ``force`` (--force)."""
    if (run := owning_run(out)) is not None:
        raise UserError(f"{out} is inside the run dir {run}: write it outside run dirs")
    if out.is_dir():
        raise UserError(f"{out} is a directory: choose a file's path")
    if out.exists() and not out.is_file():
        raise UserError(
            f"{out} is not a regular file (a FIFO, socket or device): choose another path"
        )
    if out.exists() and not force:
        raise UserError(f"{out} exists: choose another path, or pass --force to replace it")


def refuse_writes_into_other_runs(cfg: DictConfig) -> None:
    """One writer per run dir, whatever path a config gives a writer: a callback's
    ``dirpath``, a logger's ``save_dir`` or a downloading data set's ``root`` inside another
    run's dir (live or finished, links followed) is refused before anything is written."""
    own = Path(cfg.paths.output_dir)
    writers = [
        (f"callbacks.{k}.dirpath", c.get("dirpath"))
        for k, c in (cfg.get("callbacks") or {}).items()
        if c
    ]
    writers += [
        (f"logger.{k}.save_dir", c.get("save_dir"))
        for k, c in (cfg.get("logger") or {}).items()
        if c
    ]
    data = cfg.get("data") or {}
    if data.get("download"):  # a missing data set is fetched into data.root
        writers.append(("data.root", data.get("root")))
    for key, value in writers:
        if value and (other := owning_run(Path(value), own)) is not None:
            raise UserError(
                f"{key}={value} is inside the run dir {other}: a run writes only into its own "
                f"dir ({own}); leave {key} at its default"
            )


def _pid(lock_file) -> str:
    lock_file.seek(0)
    return lock_file.read().strip() or "unknown"


def _in_use(run_dir: Path, pid: str) -> UserError:
    return UserError(
        f"run dir {run_dir} is in use by another process (PID {pid}): wait for it to end, "
        "or pick another run_name"
    )


def lock_holder(run_dir: Path) -> str | None:
    """The PID of the live process (other than this one) that holds the run dir's lock, else
    None; nothing is written."""
    path = run_dir / LOCK_FILE
    if not path.is_file() or (_held_lock is not None and Path(_held_lock.name) == path):
        return None
    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released when f closes
        except BlockingIOError:
            return _pid(f)
    return None


def refuse_if_locked(run_dir: Path) -> None:
    """Refuse a run dir whose lock another process holds, without writing anything."""
    if (pid := lock_holder(run_dir)) is not None:
        raise _in_use(run_dir, pid)


def lock(run_dir: Path) -> None:
    """One writer per run dir: an exclusive lock on <run dir>/.lock, held by this process
    until the run ends (its other ranks write under rank 0's). The kernel drops the lock of a
    process that dies, so a dead run's lock is simply taken. Written by hand: neither Hydra
    nor Lightning guards a run dir against a second process."""
    global _held_lock
    release_lock()
    run_dir.mkdir(parents=True, exist_ok=True)
    f = open(run_dir / LOCK_FILE, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        error = _in_use(run_dir, _pid(f))
        f.close()
        raise error from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    _held_lock = f


def release_lock() -> None:
    global _held_lock
    if _held_lock is not None:
        _held_lock.close()  # closing the file releases the lock
        _held_lock = None


def remove_dead_writes(run_dir: Path) -> None:
    """Temporary checkpoint files (AtomicCheckpointIO's ``.<name>.<pid>.tmp``) that a killed
    run left: under the run dir's lock no live process of this run is writing one."""
    for tmp in run_dir.glob("checkpoints/.*.tmp"):
        tmp.unlink(missing_ok=True)


def resume_checkpoint(run_dir: Path) -> Path | None:
    """The newest of last.ckpt (every epoch, and on SIGTERM) and step*.ckpt (every N steps).

    Best-metric checkpoints are never newer than last.ckpt, and on_exception.ckpt holds the
    state at an error, which a resume should not start from.
    """
    candidates = [run_dir / "checkpoints" / "last.ckpt", *run_dir.glob("checkpoints/step*.ckpt")]
    existing = [p for p in candidates if p.is_file()]
    return max(existing, key=lambda p: p.stat().st_mtime_ns) if existing else None


def set_aside_checkpoints(run_dir: Path) -> Path | None:
    """resume=true with nothing to continue from starts again: the checkpoints an earlier
    attempt left (its best, on_exception.ckpt) move to ``replaced_attempt_<its time>/``, so
    that the new attempt's are its own and nothing is lost. Returns that folder, or None."""
    left = sorted((run_dir / "checkpoints").glob("*.ckpt"))
    if not left:
        return None
    when = datetime.fromtimestamp(max(p.stat().st_mtime for p in left))
    aside = run_dir / f"replaced_attempt_{when:%Y-%m-%d_%H-%M-%S}"
    aside.mkdir()
    for path in left:
        path.rename(aside / path.name)  # the same disk: nothing copied, no space needed
    return aside


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def continue_command(cfg: DictConfig, run_dir: Path) -> str:
    """The overrides that continue this run: its whole run_name where the run dir is named
    by it, else the run dir itself (a multirun job)."""
    named = Path(cfg.paths.log_dir) / str(cfg.task_name) / "runs" / str(cfg.run_name)
    if named.resolve() == run_dir.resolve():
        return f"run_name={cfg.run_name} resume=true"
    return f"hydra.run.dir={run_dir} resume=true"


def note_resume(run_dir: Path) -> None:
    """Append when and how the run was resumed, next to its original records."""
    line = f"{datetime.now().isoformat(timespec='seconds')} {' '.join(sys.argv)}\n"
    with open(run_dir / "resumes.txt", "a") as f:
        f.write(line)


def device_names(devices) -> list[str]:
    """Readable names of this process's devices: GPU models, else the CPU."""
    import torch

    return [
        torch.cuda.get_device_name(d) if d.type == "cuda" else platform.processor() or d.type
        for d in devices
    ]


def record_start(run_dir: Path, world_size: int, devices) -> None:
    """Append this (re)start's host, world size and devices to meta.json's ``starts``."""
    path = run_dir / "meta.json"
    meta = json.loads(path.read_text()) if path.exists() else {}
    start = {
        "time": datetime.now().isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "world_size": world_size,
        "devices": device_names(devices),
    }
    meta.setdefault("starts", []).append(start)
    path.write_text(json.dumps(meta, indent=2) + "\n")


def command_line_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def _swap_root_handler(name: str, handler: logging.Handler | None) -> logging.Handler | None:
    """Put ``handler`` on the root logger under ``name``, in place of the one held there."""
    root = logging.getLogger()
    old = next((h for h in root.handlers if h.name == name), None)
    if old is not None:
        root.removeHandler(old)
    if handler is not None:
        handler.set_name(name)
        root.addHandler(handler)
    return old


def hold_log_records() -> None:
    """Keep this process's log records in memory until ``open_run`` accepts the run.

    The log file is opened only then, so a refused run leaves no file behind, and the
    records from before it (config warnings, the batch) still reach the file.
    """
    close_run_log()  # a new job: an earlier run's log file in this process is done
    _swap_root_handler(_HELD, logging.handlers.MemoryHandler(capacity=10**6))


def log_to_file(run_dir: Path) -> None:
    """Append log records to <run dir>/<job name>.log (train.log, eval.log), held ones first."""
    from hydra.core.hydra_config import HydraConfig

    job = HydraConfig.get().job.name if HydraConfig.initialized() else "train"
    handler = logging.FileHandler(run_dir / f"{job}.log")
    console = next((h for h in logging.getLogger().handlers if h.formatter), None)
    handler.setFormatter(console.formatter if console else logging.Formatter(LOG_FORMAT))
    old = _swap_root_handler(_RUN_LOG, handler)
    if old is not None:
        old.close()
    held = _swap_root_handler(_HELD, None)
    if isinstance(held, logging.handlers.MemoryHandler):
        held.setTarget(handler)
        held.close()  # flushes the held records into the file


def close_run_log() -> None:
    """Detach and close the run's log file, so a later run in this process (a notebook, the
    tests) cannot write into it."""
    for name in (_RUN_LOG, _HELD):
        old = _swap_root_handler(name, None)
        if old is not None:
            old.close()
    release_lock()


def open_run(cfg: DictConfig, resume: bool = False) -> Path:
    """The run dir of ``cfg.paths.output_dir``, refused if it holds another run's results,
    recorded (config, command, git, packages) by rank 0, and logged to; a resumed run keeps
    its record. Call it after every check: a refused run must write nothing."""
    run_dir = Path(cfg.paths.output_dir)
    if is_global_zero():
        guard(run_dir, resume=resume)  # before the lock: a refused run adds no lock file
        lock(run_dir)
        guard(run_dir, resume=resume)  # again, now that no other process can write here
        remove_dead_writes(run_dir)
        if resume and (run_dir / "config.yaml").exists():
            note_resume(run_dir)  # keep the run's original config and facts
        else:
            record(run_dir, cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    log_to_file(run_dir)
    return run_dir


_first_new_folder: Path | None = None  # the highest folder of the run dir that Hydra makes


def note_new_folders(run_dir: Path) -> None:
    """Before Hydra makes the run dir: remember the highest of its folders that does not
    exist yet, so that a refusal removes every folder made for the run and no other."""
    global _first_new_folder
    folder, new = run_dir.resolve(), None
    while not folder.exists():
        folder, new = folder.parent, folder
    _first_new_folder = new


def remove_if_empty(run_dir: Path, log_dir: Path) -> None:
    """Remove a run dir that a refused run left empty (Hydra makes it before the task runs),
    and the empty folders above it that were made with it: up to the first one that did not
    exist before (note_new_folders, the log dir itself included), else up to the log dir."""
    log_dir, top = log_dir.resolve(), _first_new_folder
    if top is not None and not run_dir.resolve().is_relative_to(top):
        top = None  # noted for another run of this process
    for folder in (run_dir.resolve(), *run_dir.resolve().parents):
        if top is not None and not folder.is_relative_to(top):
            return
        if top is None and (folder == log_dir or not folder.is_relative_to(log_dir)):
            return
        try:
            folder.rmdir()  # only succeeds when empty: nothing of anyone's is lost
        except OSError:
            return


def record(run_dir: Path, cfg: DictConfig) -> None:
    """Write config.yaml, overrides.yaml, meta.json, git.diff and requirements.txt."""
    run_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, run_dir / "config.yaml", resolve=False)
    OmegaConf.save(OmegaConf.create(command_line_overrides()), run_dir / "overrides.yaml")
    diff = _git("diff", "HEAD")
    if diff:
        (run_dir / "git.diff").write_text(diff)
    meta = {
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "git_commit": _git("rev-parse", "HEAD").strip() or None,
        "git_dirty": bool(_git("status", "--porcelain").strip()),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    packages = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    (run_dir / "requirements.txt").write_text("\n".join(packages) + "\n")
