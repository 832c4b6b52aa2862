"""Hydra's own errors (an unknown option, key or override syntax) as one line, exit 2.

Hydra prints these as 7-22 lines (the config search path, every option on its own line)
and exits 1. Here they become the bad name, the nearest valid names and how to list them.
Hydra re-raises instead of printing when ``HYDRA_FULL_ERROR`` is set, which is how they
are caught; a user who sets it themselves gets Hydra's full report as before. A disk that
refuses the run dir Hydra makes (read-only, full) is one line too.
"""

import difflib
import errno
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path

from hydra.errors import (
    ConfigCompositionException,
    HydraException,
    MissingConfigException,
    OverrideParseException,
)
from omegaconf import Container, OmegaConf

from trainlab.utils.errors import UserError, storage_error
from trainlab.utils.files import home_path
from trainlab.utils.source import CONFIGS

# Keys that moved, and where to: Hydra's own "not a key" would suggest a near spelling.
MOVED = {
    "model.lr": "the peak learning rate is model.optimizer.lr, the warm-up start "
    "model.start_lr and the cosine end model.final_lr",
}


def _nearest(name: str, names) -> str:
    close = difflib.get_close_matches(name, [str(n) for n in names], n=3, cutoff=0.5)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def _same_name_below(name: str, node: Container, prefix: str = "") -> list[str]:
    """Dotted keys below ``node`` whose last part is ``name`` (``init_part`` ->
    ``features.init_part``), the config read as written (nothing resolved)."""
    found, todo = [], [(prefix, OmegaConf.to_container(node, resolve=False))]
    while todo:
        path, value = todo.pop()
        if isinstance(value, dict):
            for key, child in value.items():
                dotted = f"{path}.{key}" if path else str(key)
                if key == name and path:
                    found.append(dotted)
                todo.append((dotted, child))
    return sorted(found)


def describe(error: HydraException, script: str) -> str:
    """One line saying what is wrong with the command line and how to find the right name."""
    if isinstance(error, MissingConfigException) and error.options:
        group, _, option = (error.missing_cfg_file or "").rpartition("/")
        return (
            f"{group}={option} is not an option of {group}{_nearest(option, error.options)} "
            f"(options: {', '.join(error.options)})"
        )
    cause = error.__cause__
    if isinstance(cause, UserError):  # a plugin's own check (the Optuna sweeper's ranges)
        return str(cause)
    parent = getattr(cause, "parent_node", None)
    if isinstance(error, ConfigCompositionException) and isinstance(parent, Container):
        key = cause.full_key
        node = key.rpartition(".")[0] or "the config"
        below = _same_name_below(str(cause.key), parent, key.rpartition(".")[0])
        hint = f"; did you mean {' or '.join(below)}?" if below else ""
        if key in MOVED:
            return f"{key} is not a key of {node}; {MOVED[key]}"
        return (
            f"{key} is not a key of {node}{hint or _nearest(cause.key, parent.keys())} "
            f"(python {script} --cfg job lists every key; +{key}=... adds a new one)"
        )
    if isinstance(error, OverrideParseException):
        key, _, value = str(error.override).partition("=")
        if fix := home_path(key, value):  # Hydra's grammar has no ~ in a value
            return fix
        return (
            f"cannot read the override '{error.override}': {error.message.splitlines()[0]} (quote a value "
            f"holding spaces or brackets: key='value'; python {script} --help lists the groups)"
        )
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if str(error).startswith("Sweeping over Hydra's configuration"):  # hydra.sweeper.params.x=...
        return (
            f"{'; '.join(lines)}: search a key by giving it on the command line "
            "(python train.py -m hparams_search=optuna 'model.optimizer.lr=interval(1e-4,1e-2)'), "
            "or under hydra.sweeper.params in a configs/hparams_search/ file"
        )
    return f"{'; '.join(lines)} (python {script} --help lists the groups and options)"


def refuse(message: str, code: int = UserError.exit_code) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def one_line_hydra_errors(main: Callable) -> Callable:
    """Wrap a ``@hydra.main`` function so that Hydra's own errors print as one line, exit 2."""

    @functools.wraps(main)
    def wrapped(*args, **kwargs):
        if os.environ.get("HYDRA_FULL_ERROR"):  # the user asked for Hydra's full report
            return main(*args, **kwargs)
        os.environ["HYDRA_FULL_ERROR"] = "1"
        script = os.path.basename(sys.argv[0]) or "train.py"
        try:
            return main(*args, **kwargs)
        except HydraException as error:
            refuse(describe(error, script))
        except UserError as error:  # a sweeper's own check, before its first job
            refuse(str(error), error.exit_code)
        except ValueError as error:  # Hydra's own check of a config group given null
            if not str(error).startswith("Config group override must be"):
                raise
            nulls = [a.split("=")[0].lstrip("+") for a in sys.argv[1:] if a.endswith("=null")]
            group = next((k for k in nulls if (CONFIGS / k).is_dir()), "the group")
            refuse(
                f"{group}=null is not an option of {group}: give one by name (python {script} "
                f"--help lists them), or ~{group} to leave an optional group out"
            )
        except RuntimeError as error:  # a launcher that cannot start here (srun, sbatch)
            if said := next((s for s in str(error).splitlines() if "sbatch: error" in s), None):
                refuse(
                    f"SLURM refused the job ({said.strip()}): ask for what a node has with "
                    "hydra.launcher.partition, cpus_per_task, mem_gb or gpus_per_node"
                )
            if "slurm" not in str(error).lower():
                raise
            refuse(
                f"{str(error).splitlines()[0]}: launcher=slurm submits jobs from a SLURM login "
                "node; here use launcher=submitit_local (same code path) or local"
            )
        except OSError as error:  # Hydra makes the run dir before the task starts
            if error.errno == errno.ENAMETOOLONG and error.filename:
                name = max(Path(str(error.filename)).parts, key=len)
                refuse(
                    f"a run dir name of {len(name)} characters ({name[:40]}...) is longer than "
                    "the file system allows (255 bytes): choose a shorter run_name"
                )
            if (disk := storage_error(error)) is None:
                raise
            refuse(str(disk), disk.exit_code)
        finally:
            os.environ.pop("HYDRA_FULL_ERROR", None)

    return wrapped
