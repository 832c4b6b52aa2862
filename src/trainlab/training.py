"""The training path, top to bottom: check, build, fit, test, rate, summarise. Each step is
its own module: checks/ (everything that can refuse a run; it builds the data and the model
once, with the batch of run/batch.py), then run/'s trainer (the Trainer), fit (fit, test,
resume, signals), frozen_features (the end-of-run table), run_summary (the console table and
metrics.json).

``python train.py`` composes the config and reaches ``train`` through trainlab/commands.py;
a child rank through child_rank.py; a test or a notebook calls it with a composed config.
"""

import time

import hydra
import lightning as L
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from trainlab.checks import check
from trainlab.checks.checkpoint_config import adopt_checkpoint_shape
from trainlab.data.image_files import pin_measured
from trainlab.model.self_supervised import SelfSupervised
from trainlab.run import run_dir as rundir
from trainlab.run.fit import checkpoint_step, fit_and_test, pruned_epoch, truncate_logs
from trainlab.run.frozen_features import rate_frozen_features, stopped_by_signals
from trainlab.run.instantiate import finish_wandb
from trainlab.run.run_summary import report_run
from trainlab.run.trainer import build_trainer
from trainlab.strategy.launcher import launch_ranks_from_config
from trainlab.utils.console import print_config_tree
from trainlab.utils.logging import one_console_line


def train(cfg: DictConfig) -> float | None:
    """Fit (and test) the configured model; return ``cfg.optimized_metric`` for sweepers."""
    start = time.monotonic()
    one_console_line()
    adopt_checkpoint_shape(cfg, rundir.command_line_overrides())  # init_from: its weights' shape
    pin_measured(cfg)  # a folder's channels and size: numbers in the run's config.yaml
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True)
    accepted = check(cfg)  # everything that can refuse the run, one line each
    datamodule, model, batch = accepted.datamodule, accepted.model, accepted.batch
    if rundir.is_global_zero() and cfg.extras.get("print_config"):
        print_config_tree(cfg)  # once every check has passed: a refusal is a line
    # Only now, with every check passed, is anything written: a refused run leaves no trace.
    run_dir = rundir.open_run(cfg, resume=cfg.get("resume", False))
    if accepted.fit is not None and rundir.is_global_zero():
        accepted.fit.record(run_dir)  # a resume and the child ranks apply it
    # The accepted config: the memory fit's accumulation is in its trainer node.
    trainer, loggers = build_trainer(accepted.config, run_dir)
    launcher = launch_ranks_from_config(trainer, cfg, run_dir)
    devices = getattr(trainer.strategy, "parallel_devices", None) or [trainer.strategy.root_device]
    if trainer.is_global_zero:
        rundir.record_start(run_dir, trainer.world_size, devices)
    if cfg.get("compile"):  # the compile part's function (configs/compiler/)
        hydra.utils.instantiate(cfg.compiler)(model)
    if cfg.get("resume") and trainer.is_global_zero:  # before a logger writes: TensorBoard's
        # writer takes the step to hide from when it is made. No checkpoint: every row goes.
        resumed_at = rundir.resume_checkpoint(run_dir)
        truncate_logs(trainer, checkpoint_step(resumed_at) if resumed_at else 0)
    for logger in loggers:
        logger.log_hyperparams(OmegaConf.to_container(accepted.config, resolve=True))
    chosen, feature_summary = None, {}
    try:
        metrics, best, facts = fit_and_test(cfg, trainer, model, datamodule, run_dir)
        last = run_dir / "checkpoints" / "last.ckpt"
        rate = cfg.features.enabled and isinstance(model, SelfSupervised)
        if rate and pruned_epoch(trainer) is None:
            # last.ckpt: the weights the summary's final val/* monitors describe
            rated = str(last) if last.exists() else best or str(last)
            with stopped_by_signals(
                run_dir, rundir.continue_command(cfg, run_dir), trainer.is_global_zero
            ):
                metrics, chosen, feature_summary = rate_frozen_features(
                    cfg, trainer, rated, datamodule, metrics
                )
    finally:
        finish_wandb(loggers)
        if launcher is not None:
            launcher.finish()  # children done, process group gone: the next job starts clean
        elif dist.is_available() and dist.is_initialized():
            # A child, torchrun or SLURM rank. Lightning destroys only NCCL groups at exit; a
            # gloo group left to interpreter shutdown can abort the process (SIGABRT,
            # "terminate called without an active exception": pytorch/pytorch#190489).
            dist.destroy_process_group()
    if not trainer.is_global_zero:
        return metrics.get(cfg.get("optimized_metric") or "")
    run = {"run_dir": str(run_dir), "wall_seconds": round(time.monotonic() - start, 2), **facts}
    run |= {**batch, **feature_summary, "devices": [str(d) for d in devices]}
    run["precision"] = str(trainer.precision)  # as resolved (${cpu_precision:...})
    report_run(cfg, trainer, run_dir, metrics, best, run, chosen)
    return metrics.get(cfg.get("optimized_metric") or "")
