"""Everything that can refuse a run, behind one entry: ``check(cfg)``. A refusal is one line
that names the key and says how to fix it (exit 2), and it comes before anything is written
to the run dir. The modules of this package, cheapest first:

- ``hydra_errors``: Hydra's own errors (an unknown group, a mistyped key) as one line;
- ``placement``: where the run dir lies (a Hydra callback, before Hydra makes the folder);
- ``config``: ranges by key and rules across keys; then, with the classes imported, every
  node's values and types against its class's signature;
- ``override_types``: what the command line typed against what the config holds;
- ``allowed_targets``: a config read from a run dir is data: which classes it may name;
- ``checkpoint_config``: the config of the run that wrote a checkpoint, read as data, whose
  encoder shape and input format a probe, a fine-tune or eval.py then takes;
- the run dir: not in use, not finished (``run_dir.guard``), no writer into another run;
- ``preflight``: the data, the devices, the model, its optimizer, the callbacks and the
  Trainer built, and one real batch through the model.

All but the signatures and preflight need no torch, so ``python train.py`` refuses a
mistyped value before importing torch and Lightning (``check_before_torch``; importing them
takes seconds).
"""

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from trainlab.checks.config import check_config
from trainlab.checks.override_types import check_override_types
from trainlab.run import run_dir as rundir
from trainlab.run.overrides import resume_changes
from trainlab.utils.errors import ConfigError
from trainlab.utils.logging import get_logger

log = get_logger(__name__)


def check_before_torch(cfg: DictConfig, config_name: str = "train") -> None:
    """What needs no torch: the command line's types, the ranges by key and the rules
    across keys (no class's signature: that needs its import), and the run dir's state."""
    check_config(cfg, rundir.command_line_overrides(), imports=False, warn=False)
    if GlobalHydra.instance().is_initialized():  # from a command line (not a child rank,
        # which runs rank 0's checked config, nor a test's composed config); it composes
        # the config once more (0.2-0.3 s)
        check_override_types(cfg, config_name, list(HydraConfig.get().overrides.task))
    if rundir.is_global_zero():  # a file check: a run dir in use or finished, refused now
        rundir.guard(Path(cfg.paths.output_dir), resume=cfg.get("resume", False))


@dataclass
class Accepted:
    """What the checks built to find out, handed on so that nothing is built twice."""

    datamodule: Any
    model: Any
    batch: dict  # per-device and global batch, world size, accumulation, lr_scale
    config: DictConfig  # the composed config with the learning rates scaled (run/batch.py)
    # and the memory fit's accumulation and checkpointing (configs/memory_fit/)
    fit: Any = None  # what the memory fit decided or recorded: changes, apply, record


def check(cfg: DictConfig) -> Accepted:
    """Every check that can refuse the run, before anything is written to its run dir. It
    builds the datamodule, a Trainer it drops (for the world size) and the model; rank 0 also
    puts one real batch through the model (preflight), child ranks run rank 0's checked
    config. ``cfg`` is not changed."""
    from trainlab.checks.preflight import (
        build_model,
        check_batch_statistics,
        dry_trainer,
        preflight,
        refuse_images_below_the_stride,
    )
    from trainlab.evaluation.rating_data import check_rating_data
    from trainlab.networks.weights import check_fits
    from trainlab.run.batch import batch_for_world  # torch and Lightning
    from trainlab.strategy.checks import check_launch

    check_config(cfg, rundir.command_line_overrides())  # every value and type, imported
    if rundir.is_global_zero():
        rundir.guard(Path(cfg.paths.output_dir), resume=cfg.get("resume", False))
    resumed = check_checkpoints(cfg)
    rundir.refuse_writes_into_other_runs(cfg)
    refuse_multirun_under_torchrun()
    refuse_missing_packages(cfg)
    warn_resume_changes(cfg)
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.check()  # before the model: a missing data set costs one line, not minutes
    check_rating_data(cfg)  # features.data: the labelled set the end-of-run table reads
    check_launch(cfg)  # before any process starts: devices, precision, strategy, comm hook
    # The world size fixes the per-device batch and the scaled learning rates, which the
    # model is built with.
    batch, settled = batch_for_world(cfg, dry_trainer(cfg), datamodule)
    model = build_model(settled)
    if resumed:
        check_fits(*resumed, model)
    check_batch_statistics(settled, model, batch["world_size"])
    refuse_images_below_the_stride(settled, model)
    # Will it fit the device? Before the run dir: a run that fits no way stops here. The
    # model stays: the global batch, and so the learning rates, are the same.
    plan = hydra.utils.instantiate(cfg.memory_fit) if cfg.get("memory_fit") else None
    fit = (
        plan(settled, model, datamodule, batch["world_size"], rundir.is_global_zero())
        if plan
        else None
    )
    if fit is not None and fit.changes(cfg):
        fitted = fit.apply(cfg)
        batch, settled = batch_for_world(fitted, dry_trainer(fitted), datamodule)
    if rundir.is_global_zero():
        # its optimizer, callbacks, one real batch, a full batch per device
        preflight(settled, datamodule, model, batch["world_size"])
    return Accepted(datamodule, model, batch, settled, fit)


def refuse_multirun_under_torchrun() -> None:
    """Under torchrun every process would run the whole sweep and pick its own values."""
    from hydra.types import RunMode

    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    if multirun and "TORCHELASTIC_RUN_ID" in os.environ:
        raise ConfigError(
            "a multirun (-m) cannot run under torchrun: sweep with Lightning's launcher "
            "(python train.py -m ... trainer.devices=N), or run each job under torchrun"
        )


#: Loggers that import their package only when built, after the run dir is open.
IMPORTED_WHEN_BUILT = {"lightning.pytorch.loggers.WandbLogger": "wandb"}


def refuse_missing_packages(cfg: DictConfig) -> None:
    """A logger whose package is not installed (run/failures.py's pip command), refused
    before its run dir exists."""
    from trainlab.run.failures import missing_dependency

    loggers = cfg.get("logger") or {}
    targets = {node.get("_target_") for node in loggers.values() if isinstance(node, DictConfig)}
    for target, package in IMPORTED_WHEN_BUILT.items():
        if target in targets and importlib.util.find_spec(package) is None:
            raise missing_dependency(ModuleNotFoundError(name=package))


def check_checkpoints(cfg: DictConfig) -> tuple[str, dict] | None:
    """The weights files the config names (model.init_from, model.net.init_from, resume_from)
    and the one resume=true continues from readable with weights_only loading, before
    anything is written. Returns the one the run resumes from, as read (memory-mapped), with
    words naming it, for the check against the built model (run/fit.py's choice: resume=true's
    newest checkpoint, else resume_from)."""
    from trainlab.networks.weights import check_readable  # torch

    resumed = None
    for key in ("model.init_from", "model.net.init_from", "resume_from"):
        if path := OmegaConf.select(cfg, key):
            read = check_readable(path)
            if key == "resume_from":
                resumed = (f"resume_from={path}: its weights", read)
    if cfg.get("resume") and rundir.is_global_zero():
        if (last := rundir.resume_checkpoint(Path(cfg.paths.output_dir))) is not None:
            resumed = (f"resume=true: the weights in {last}", check_readable(last))
    return resumed


def warn_resume_changes(cfg: DictConfig) -> None:
    """resume=true with values that differ from the run's config.yaml: they apply now, and
    the log says which."""
    from trainlab.checks.checkpoint_config import load_run_config

    saved = Path(cfg.paths.output_dir) / "config.yaml"
    if cfg.get("resume") and rundir.is_global_zero() and saved.is_file():
        # compared with the command line, never built: its classes need no check
        for change in resume_changes(load_run_config(saved, check=False), cfg):
            if change.startswith("memory_fit."):  # memory_fit/fit.py keeps the run's choice
                log.warning(f"resume: {change} (the run keeps the fit chosen at its first start)")
            else:
                log.warning(f"resume: {change} (differs from the run's config.yaml; applies now)")
