"""The checks that can refuse a run, all before anything is written to its run dir."""

import os
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from trainlab.networks.weights import check_readable
from trainlab.run import run_dir as rundir
from trainlab.run.checkpoint_config import adopt_encoder_shape, load_run_config
from trainlab.run.config_checks import check_config
from trainlab.run.overrides import resume_changes
from trainlab.strategy.submitit_ranks import adopt_submitit_local_ranks
from trainlab.utils.errors import ConfigError
from trainlab.utils.logging import get_logger

log = get_logger(__name__)


def refuse_multirun_under_torchrun() -> None:
    """Under torchrun every process would run the whole sweep and pick its own values."""
    from hydra.types import RunMode

    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    if multirun and "TORCHELASTIC_RUN_ID" in os.environ:
        raise ConfigError(
            "a multirun (-m) cannot run under torchrun: sweep with Lightning's launcher "
            "(python train.py -m ... trainer.devices=N), or run each job under torchrun"
        )


def check_checkpoints(cfg: DictConfig) -> None:
    """The weights files the config names (model.init_from, model.net.init_from, resume_from)
    and the one resume=true continues from readable with weights_only loading, before
    anything is written."""
    for key in ("model.init_from", "model.net.init_from", "resume_from"):
        path = OmegaConf.select(cfg, key)
        if path:
            check_readable(path)
    if cfg.get("resume") and rundir.is_global_zero():
        if (last := rundir.resume_checkpoint(Path(cfg.paths.output_dir))) is not None:
            check_readable(last)


def accept_run(cfg: DictConfig) -> None:
    """Every check that can refuse the run, before anything is written to its run dir."""
    adopt_submitit_local_ranks()  # before anything asks which rank this is
    adopt_encoder_shape(cfg, rundir.command_line_overrides())  # a probe: its weights' shape
    check_config(cfg, values=False)  # the values: trainlab.train, before torch
    check_checkpoints(cfg)
    rundir.refuse_writes_into_other_runs(cfg)
    refuse_multirun_under_torchrun()
    if rundir.is_global_zero():  # child ranks run rank 0's resolved copy of this config
        saved = Path(cfg.paths.output_dir) / "config.yaml"
        if cfg.get("resume") and saved.is_file():
            # compared with the command line, never built: its classes need no check
            for change in resume_changes(load_run_config(saved, check=False), cfg):
                log.warning(f"resume: {change} (differs from the run's config.yaml; applies now)")
