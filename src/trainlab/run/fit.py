"""Fit and test, resumed when asked; how a stopped run exits (128 + signal) and what a
resumed run's logs drop (the steps it will log again)."""

import signal
import sys
from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from trainlab.callbacks.interruption import InterruptionCheckpoint
from trainlab.run import run_dir as rundir
from trainlab.run.fit_record import forget_fit, keep_fit
from trainlab.run.metrics_file import final_metrics
from trainlab.utils import lightning_internals
from trainlab.utils.logging import get_logger

log = get_logger(__name__)
#: How a run stopped by a signal exits: 128 + the signal, as a process killed by it would.
STOP_CODES = {128 + s for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)}


def pruned_epoch(trainer: L.Trainer) -> int | None:
    """The epoch after which a sweeper's callback stopped this trial (its ``pruned_at``: the
    Optuna part's OptunaPruning); None when none did."""
    stops = (getattr(c, "pruned_at", None) for c in trainer.callbacks)
    return next((epoch for epoch in stops if epoch is not None), None)


def stop_after_signal(trainer: L.Trainer, run_dir: Path, cfg: DictConfig) -> None:
    """Exit with 128 + signal, as a process killed by it would: launchers (torchrun, SLURM)
    then restart or requeue the job instead of taking it for finished."""
    saver = next((c for c in trainer.callbacks if isinstance(c, InterruptionCheckpoint)), None)
    signum = (saver.signal if saver else None) or signal.SIGTERM
    requeues = saver.requeues if saver else None  # "SLURM", a launcher's ("submitit"), None
    checkpoints = f"{run_dir}/checkpoints"
    if trainer.state.fn == "test":
        said = f"during the final test: training had ended, its checkpoints are in {checkpoints}; "
        said += (
            f"{requeues} requeues the job, which tests again"
            if requeues
            else f"test one with python eval.py ckpt_path={checkpoints}/<checkpoint>"
        )
    else:
        saved = (
            f"saved {checkpoints}/last.ckpt"
            if saver
            else "nothing saved (callbacks.interruption is off)"
        )
        then = (
            f"{requeues} requeues the job, which resumes from it with resume=true"
            if requeues
            else f"continue with the same command plus {rundir.continue_command(cfg, run_dir)}"
        )
        said = f"at step {trainer.global_step}: {saved}; {then}"
    if trainer.is_global_zero:
        print(f"stopped by {signum.name} {said}", file=sys.stderr, flush=True)
    if saver:
        saver.requeue(trainer)  # SLURM's requeue, or a launcher's
    raise SystemExit(128 + signum)


def fit_and_test(cfg: DictConfig, trainer: L.Trainer, model, datamodule, run_dir: Path):
    """(final metrics, best checkpoint path or "", the fit's facts for metrics.json): fit,
    resumed when asked, then test the best checkpoint. A SIGTERM exits as the signal would,
    after last.ckpt is saved. A resume whose fit had ended (stopped in the test or the
    end-of-run table) reports the recorded fit's metrics and facts (run/fit_record.py)."""
    resume_from = rundir.resume_checkpoint(run_dir) if cfg.get("resume") else None
    if cfg.get("resume"):
        log.info(
            f"resuming from {resume_from}"
            if resume_from
            else f"nothing to continue from in {run_dir}/checkpoints (no last.ckpt, no "
            "step*.ckpt): starting fresh"
        )
    elif cfg.get("resume_from"):
        resume_from = cfg.resume_from
        log.info(f"starting from the training state of {resume_from}")
    if resume_from is None and trainer.is_global_zero:
        forget_fit(run_dir)  # a fit from step 0: a record is of an attempt it replaces
        if cfg.get("resume") and (aside := rundir.set_aside_checkpoints(run_dir)):
            names = ", ".join(p.name for p in sorted(aside.iterdir()))
            log.warning(f"resume=true starts again: the earlier attempt's {names} moved to {aside}")
    try:
        # weights_only: a checkpoint restores tensors and plain values, never runs code.
        trainer.fit(model, datamodule=datamodule, ckpt_path=resume_from, weights_only=True)
        metrics, facts = keep_fit(run_dir, trainer, final_metrics(trainer))
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        if cfg.get("test") and pruned_epoch(trainer) is None:  # a pruned trial stops here
            # verbose=False: the run summary shows the test metrics, Lightning's table again
            trainer.test(
                model,
                datamodule=datamodule,
                ckpt_path=best or None,
                weights_only=True,
                verbose=False,
            )
            metrics.update(final_metrics(trainer))
    except SIGTERMException:  # pre-empted: InterruptionCheckpoint saved last.ckpt
        stop_after_signal(trainer, run_dir, cfg)
    except SystemExit:  # Lightning exits 1 after a KeyboardInterrupt (a second Ctrl-C)
        saver = next((c for c in trainer.callbacks if isinstance(c, InterruptionCheckpoint)), None)
        if saver is None or not saver.stopped_at_once:
            raise
        print(
            f"stopped by a second Ctrl-C; continue from the last checkpoint with the same "
            f"command plus {rundir.continue_command(cfg, run_dir)}",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(128 + signal.SIGINT)  # 130, as a shell reports a process Ctrl-C stopped
    return metrics, best, facts


def checkpoint_step(checkpoint: Path) -> int:
    import torch

    return torch.load(checkpoint, map_location="cpu", mmap=True, weights_only=True)["global_step"]


def truncate_logs(trainer: L.Trainer, step: int) -> None:
    """Drop the rows the run logged from ``step`` on (a kill lands between two checkpoints,
    or before the first): the resumed run logs those steps again, and each step stays once."""
    for logger in trainer.loggers:
        if hasattr(logger, "truncate_from"):
            logger.truncate_from(step)
        elif isinstance(logger, TensorBoardLogger):
            # TensorBoard's own way: the writer, made on first use, hides events from `step`.
            lightning_internals.purge_tensorboard_from(logger, step)
