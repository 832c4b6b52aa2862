"""Training: build everything from the composed config, fit, test, report.

``python train.py`` reaches ``train`` here through trainlab/train.py, once the checks that
need no torch have passed.
"""

import os
import signal
import sys
import time
from pathlib import Path

import hydra
import lightning as L
import torch.distributed as dist
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from trainlab.callbacks.comm_count import CommCounter
from trainlab.callbacks.comm_stats import CommStatsLogger
from trainlab.callbacks.interruption import InterruptionCheckpoint
from trainlab.callbacks.memory_estimate import MemoryEstimate
from trainlab.callbacks.optuna_pruning import OptunaPruning, pruned_epoch
from trainlab.callbacks.run_stats import RunStats
from trainlab.callbacks.seed_each_step import SeedEachStep
from trainlab.evaluation.checkpoint import bounded_splits, print_ratings, rate_checkpoint
from trainlab.evaluation.features import Extraction
from trainlab.evaluation.protocol import choices
from trainlab.evaluation.protocol import metrics as protocol_metrics
from trainlab.model.compile import compile_networks
from trainlab.model.networks.weights import check_readable
from trainlab.model.self_supervised import SelfSupervised
from trainlab.run import run_dir as rundir
from trainlab.run.batch import per_device_batch, scale_learning_rates
from trainlab.run.checkpoint_config import adopt_encoder_shape, load_run_config
from trainlab.run.config_checks import check_config
from trainlab.run.instantiate import (
    finish_wandb,
    instantiate_callbacks,
    instantiate_loggers,
    instantiate_strategy,
)
from trainlab.run.overrides import resume_changes
from trainlab.run.preflight import preflight
from trainlab.run.results import batch_facts, final_metrics, report
from trainlab.strategy.checks import check_launch
from trainlab.strategy.launcher import launch_ranks_from_config
from trainlab.strategy.submitit_ranks import adopt_submitit_local_ranks
from trainlab.utils.console import print_config_tree
from trainlab.utils.errors import ConfigError, DataError
from trainlab.utils.logging import get_logger

log = get_logger(__name__)
# RunStats' numbers in the run summary (tokens, TFLOP/s and MFU where the module counts them)
SPEED_ROWS = {
    "train_samples_per_s": "train samples/s",
    "train_tokens_per_s": "train tokens/s",
    "train_tflops_per_s": "train TFLOP/s",
    "train_mfu": "MFU",
    "comm_bytes_per_step": "gradient bytes sent/step (per rank)",
    "other_comm_bytes_per_step": "other bytes sent/step (per rank)",
    "estimated_peak_gib": "peak memory, estimated (GiB)",
    "peak_memory_gib": "peak memory, measured (GiB)",
}


def refuse_multirun_under_torchrun() -> None:
    """Under torchrun every process would run the whole sweep and pick its own values."""
    from hydra.types import RunMode

    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    if multirun and "TORCHELASTIC_RUN_ID" in os.environ:
        raise ConfigError(
            "a multirun (-m) cannot run under torchrun: sweep with Lightning's launcher "
            "(python train.py -m ... trainer.devices=N), or run each job under torchrun"
        )


def stop_after_signal(trainer: L.Trainer, run_dir: Path) -> None:
    """Exit with 128 + signal, as a process killed by it would: launchers (torchrun, SLURM)
    then restart or requeue the job instead of taking it for finished."""
    saver = next((c for c in trainer.callbacks if isinstance(c, InterruptionCheckpoint)), None)
    signum = (saver.signal if saver else None) or signal.SIGTERM
    if trainer.is_global_zero and trainer.state.fn == "test":
        print(
            f"stopped by {signum.name} during the final test: training had ended, its "
            f"checkpoints are in {run_dir}/checkpoints; test one with "
            f"python eval.py ckpt_path={run_dir}/checkpoints/<checkpoint>",
            file=sys.stderr,
            flush=True,
        )
    elif trainer.is_global_zero:
        saved = (
            f"saved {run_dir}/checkpoints/last.ckpt"
            if saver
            else "nothing saved (callbacks.interruption is off)"
        )
        then = (
            "submitit requeues the job, which resumes from it with resume=true"
            if saver and saver.requeues
            else f"continue with the same command plus run_name={run_dir.name} resume=true"
        )
        print(
            f"stopped by {signum.name} at step {trainer.global_step}: {saved}; {then}",
            file=sys.stderr,
            flush=True,
        )
    if saver:
        saver.requeue()  # under submitit: rank 0 requeues the job and exits here
    raise SystemExit(128 + signum)


def rate_frozen_features(
    cfg: DictConfig, trainer: L.Trainer, ckpt: str, datamodule, metrics: dict
) -> tuple[dict, dict | None, dict]:
    """The feature protocol's table for a pre-training run's checkpoint, in the summary:
    (metrics, chosen, facts for metrics.json's run). Every rank computes its share of the
    features on its device (evaluation/features.py) before the process group goes away;
    rank 0 prints."""
    if not Path(ckpt).is_file():
        log.info("no checkpoint written (checkpointing off): frozen features not rated")
        return metrics, None, {}
    log.info(f"rating the frozen {cfg.features.init_part} of {ckpt} (features.enabled=false skips)")
    if cfg.data.get("holdout_val") is False:  # an image folder's val/ is also its test split
        datamodule = hydra.utils.instantiate(cfg.data, holdout_val=True)
    how = Extraction(
        device=trainer.strategy.root_device,
        batch_size=datamodule.eval_batch_size,
        num_workers=cfg.data.get("num_workers") or 0,
        rank=trainer.global_rank,
        world_size=trainer.world_size,
        all_gather=trainer.strategy.all_gather,
    )
    bounds = {k: cfg.features.get(k) for k in ("train_per_class", "eval_per_class")}
    start = time.monotonic()
    try:
        seed = cfg.get("seed") or 0
        sizes = {k: len(v) for k, v in bounded_splits(datamodule, *bounds.values(), seed).items()}
        ratings = rate_checkpoint(
            cfg.model.encoder, ckpt, datamodule, cfg.features.init_part,
            cfg.features.baselines, seed, how, **bounds,
        )  # fmt: skip
    except DataError as error:  # training succeeded: report, do not fail the run
        log.warning(f"frozen features not rated: {error}")
        return metrics, None, {}
    seconds = round(time.monotonic() - start, 1)
    facts = {
        "features_seconds": seconds,
        "features_images": sizes,
        "features_ranks": how.world_size,
    }
    if trainer.is_global_zero:
        used = ", ".join(f"{k} {n:,}" for k, n in sizes.items())
        print_ratings(
            ratings,
            f"frozen features of {Path(ckpt).name} ({datamodule.name}; images: {used}; "
            f"{how.world_size} rank(s), {seconds} s)",
        )
    return {**metrics, **protocol_metrics(ratings)}, choices(ratings), facts


def build_trainer(cfg: DictConfig, run_dir: Path) -> tuple[L.Trainer, list, list]:
    """The Trainer with the config's callbacks, loggers and strategy, plus trainlab's own,
    and the callbacks whose ``summary()`` goes into metrics.json's ``run``."""
    reporters = [RunStats(cfg.get("peak_tflops")), CommCounter(), MemoryEstimate()]
    # SeedEachStep always: without it a resumed run would draw other random numbers.
    callbacks = [*instantiate_callbacks(cfg.get("callbacks")), *reporters, SeedEachStep()]
    if cfg.get("optuna_trial"):  # a trial of hparams_search=optuna: its pruner may stop it
        sweeper = HydraConfig.get().sweeper if HydraConfig.initialized() else {}
        pruner = hydra.utils.instantiate(sweeper.get("pruner"))  # rank 0's; children: None
        callbacks.append(
            OptunaPruning(**cfg.optuna_trial, monitor=cfg.optimized_metric, pruner=pruner)
        )
    loggers = instantiate_loggers(cfg.get("logger"), run_dir)
    trainer: L.Trainer = hydra.utils.instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=loggers or False,
        strategy=instantiate_strategy(cfg.get("strategy")),
    )
    if getattr(trainer.strategy, "comm_hook", None):
        trainer.callbacks.append(CommStatsLogger())
    return trainer, loggers, reporters


def settle_batch(cfg: DictConfig, trainer: L.Trainer, datamodule) -> dict:
    """Per-device batch from data.global_batch_size, and learning rates scaled to the global
    batch (lr_scaling) in ``cfg.model``: batch_facts plus ``lr_scale``."""
    if datamodule.global_batch_size:
        datamodule.batch_size = per_device_batch(
            datamodule.global_batch_size, trainer.world_size, trainer.accumulate_grad_batches
        )
    facts = batch_facts(trainer, datamodule.batch_size)
    facts["lr_scale"] = scale_learning_rates(cfg, facts["global_batch_size"])
    log.info(
        f"batch: {facts['batch_size_per_device']} per device x {facts['world_size']} "
        f"device(s) x {facts['accumulate_grad_batches']} accumulation = "
        f"{facts['global_batch_size']} per optimizer step; learning rates x{facts['lr_scale']:.4g} "
        f"(lr_scaling.rule={OmegaConf.select(cfg, 'lr_scaling.rule', default='none')})"
    )
    return facts


def fit_and_test(cfg: DictConfig, trainer: L.Trainer, model, datamodule, run_dir: Path):
    """(final metrics, best checkpoint path or ""): fit, resumed when asked, then test the
    best checkpoint. A SIGTERM exits as the signal would, after last.ckpt is saved."""
    resume_from = rundir.resume_checkpoint(run_dir) if cfg.get("resume") else None
    if cfg.get("resume"):
        log.info(
            f"resuming from {resume_from}"
            if resume_from
            else f"no checkpoint in {run_dir}/checkpoints: starting fresh"
        )
    elif cfg.get("resume_from"):
        resume_from = cfg.resume_from
        log.info(f"starting from the training state of {resume_from}")
    try:
        # weights_only: a checkpoint restores tensors and plain values, never runs code.
        trainer.fit(model, datamodule=datamodule, ckpt_path=resume_from, weights_only=True)
        metrics = final_metrics(trainer)
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        if cfg.get("test") and pruned_epoch(trainer) is None:  # a pruned trial stops here
            trainer.test(model, datamodule=datamodule, ckpt_path=best or None, weights_only=True)
            metrics.update(final_metrics(trainer))
    except SIGTERMException:  # pre-empted: InterruptionCheckpoint saved last.ckpt
        stop_after_signal(trainer, run_dir)
    except SystemExit:  # Lightning exits 1 after a KeyboardInterrupt (a second Ctrl-C)
        saver = next((c for c in trainer.callbacks if isinstance(c, InterruptionCheckpoint)), None)
        if saver is None or not saver.stopped_at_once:
            raise
        print(
            f"stopped by a second Ctrl-C; continue from the last checkpoint with the same "
            f"command plus run_name={run_dir.name} resume=true",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(128 + signal.SIGINT)  # 130, as a shell reports a process Ctrl-C stopped
    return metrics, best


def checkpoint_step(checkpoint: Path) -> int:
    import torch

    return torch.load(checkpoint, map_location="cpu", mmap=True, weights_only=True)["global_step"]


def truncate_logs(trainer: L.Trainer, step: int) -> None:
    """Drop the rows the run logged from ``step`` on (a kill lands between two checkpoints,
    or before the first): the resumed run logs those steps again, and each step stays once."""
    for logger in trainer.loggers:
        if hasattr(logger, "truncate_from"):
            logger.truncate_from(step)
        elif isinstance(logger, TensorBoardLogger) and logger._experiment is None:
            # TensorBoard's own way: the writer, made on first use, hides events from `step`.
            logger._kwargs["purge_step"] = step


def check_checkpoints(cfg: DictConfig) -> None:
    """The weights files the config names (model.init_from, model.net.init_from, resume_from)
    readable with weights_only loading, before anything is written."""
    for key in ("model.init_from", "model.net.init_from", "resume_from"):
        path = OmegaConf.select(cfg, key)
        if path:
            check_readable(path)


def accept_run(cfg: DictConfig) -> None:
    """Every check that can refuse the run, before anything is written to its run dir."""
    adopt_submitit_local_ranks()  # before anything asks which rank this is
    adopt_encoder_shape(cfg, rundir.command_line_overrides())  # a probe: its weights' shape
    check_config(cfg, types=True, values=False)  # the values: trainlab.train, before torch
    check_checkpoints(cfg)
    rundir.refuse_writes_into_other_runs(cfg)
    refuse_multirun_under_torchrun()
    if rundir.is_global_zero():  # child ranks run rank 0's resolved copy of this config
        saved = Path(cfg.paths.output_dir) / "config.yaml"
        if cfg.get("resume") and saved.is_file():
            # compared with the command line, never built: its classes need no check
            for change in resume_changes(load_run_config(saved, check=False), cfg):
                log.warning(f"resume: {change} (differs from the run's config.yaml; applies now)")
        if cfg.extras.get("print_config"):
            print_config_tree(cfg)


def report_run(
    cfg: DictConfig, trainer: L.Trainer, run_dir: Path, metrics: dict, best: str, run: dict, chosen
) -> None:
    """Rank 0's run summary (console table and metrics.json); a pruned trial then raises
    optuna.TrialPruned, which the sweeper records (hydra_plugins)."""
    last = run_dir / "checkpoints" / "last.ckpt"
    pruned_at = pruned_epoch(trainer)
    name = cfg.get("optimized_metric")
    report(
        "run summary",
        run_dir,
        metrics,
        head={"run dir": run_dir, "best checkpoint": best or "-"},
        tail={
            **({"pruned after epoch": pruned_at} if pruned_at is not None else {}),
            "wall time (s)": run["wall_seconds"],
            "precision": run["precision"],
            **{label: run[key] for key, label in SPEED_ROWS.items() if key in run},
        },
        checkpoints={"best": best or None, "last": str(last) if last.exists() else None},
        run=run,
        optimized_metric={"name": name, "value": metrics.get(name) if name else None},
        **({"chosen": chosen} if chosen else {}),
        **({"pruned": {"epoch": pruned_at}} if pruned_at is not None else {}),
    )
    if pruned_at is not None:
        import optuna

        raise optuna.TrialPruned(f"pruned after epoch {pruned_at}")


def train(cfg: DictConfig) -> float | None:
    """Fit (and test) the configured model; return ``cfg.optimized_metric`` for sweepers.
    Called by trainlab.train.train, after the checks that need no torch."""
    start = time.monotonic()
    accept_run(cfg)
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True)
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.check()  # before the model: a missing data set costs one line, not minutes
    check_launch(cfg)  # before any process starts: devices, precision, strategy, comm hook
    if rundir.is_global_zero():  # child ranks run rank 0's config, already through it
        preflight(cfg, datamodule)  # the model built and one real batch through it
    # Only now, with every check passed, is anything written: a refused run leaves no trace.
    run_dir = rundir.open_run(cfg, resume=cfg.get("resume", False))
    trainer, loggers, reporters = build_trainer(cfg, run_dir)
    launcher = launch_ranks_from_config(trainer, cfg, run_dir)
    devices = getattr(trainer.strategy, "parallel_devices", None) or [trainer.strategy.root_device]
    if trainer.is_global_zero:
        rundir.record_start(run_dir, trainer.world_size, devices)
    # The Trainer comes before the model: the world size fixes the per-device batch and the
    # scaled learning rates, which are written into cfg.model, and the model is built from it.
    facts = settle_batch(cfg, trainer, datamodule)
    model = hydra.utils.instantiate(cfg.model)
    if cfg.get("compile"):
        compile_networks(model)
    if cfg.get("resume") and trainer.is_global_zero:  # before a logger writes: TensorBoard's
        # writer takes the step to hide from when it is made. No checkpoint: every row goes.
        resumed_at = rundir.resume_checkpoint(run_dir)
        truncate_logs(trainer, checkpoint_step(resumed_at) if resumed_at else 0)
    for logger in loggers:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    chosen, facts_of_features = None, {}
    try:
        metrics, best = fit_and_test(cfg, trainer, model, datamodule, run_dir)
        last = run_dir / "checkpoints" / "last.ckpt"
        rate = cfg.features.enabled and isinstance(model, SelfSupervised)
        if rate and pruned_epoch(trainer) is None:
            # last.ckpt: the weights the summary's final val/* monitors describe
            rated = str(last) if last.exists() else best or str(last)
            metrics, chosen, facts_of_features = rate_frozen_features(
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
    run = {"run_dir": str(run_dir), "wall_seconds": round(time.monotonic() - start, 2)}
    for reporter in reporters:
        run |= reporter.summary()
    run |= {**facts, **facts_of_features, "devices": [str(d) for d in devices]}
    run["precision"] = str(trainer.precision)  # as resolved: ijepa_mnist picks it by the CPU
    report_run(cfg, trainer, run_dir, metrics, best, run, chosen)
    return metrics.get(cfg.get("optimized_metric") or "")
