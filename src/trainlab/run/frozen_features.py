"""The end-of-run table: the feature protocol on a pre-training run's checkpoint. Training has
ended when it starts, so a stop signal there (SIGTERM, SIGUSR1, Ctrl-C) ends the table at
once with one line and 128 + the signal: ``resume=true`` rates again, and the summary keeps
the fit's metrics (run/fit_record.py)."""

import sys
import time
from contextlib import contextmanager
from pathlib import Path

import lightning as L
from omegaconf import DictConfig

from trainlab.callbacks.interruption import requeue_slurm_job
from trainlab.evaluation.checkpoint import (
    bounded_splits,
    print_ratings,
    rate_checkpoint,
    ratings_title,
)
from trainlab.evaluation.features import Extraction
from trainlab.evaluation.protocol import choices
from trainlab.evaluation.protocol import metrics as protocol_metrics
from trainlab.evaluation.rating_data import rating_data
from trainlab.run.stop_signals import Stopped, signals_raise_stopped
from trainlab.utils.errors import DataError
from trainlab.utils.logging import get_logger

log = get_logger(__name__)


@contextmanager
def stopped_by_signals(run_dir: Path, continue_with: str, is_global_zero: bool):
    """A stop signal in the table: one line on rank 0, exit 128 + signal; the fit is saved."""
    try:
        with signals_raise_stopped():
            yield
    except Stopped as stop:
        requeued = stop.signum.name == "SIGUSR1" and requeue_slurm_job(ask=is_global_zero)
        then = f"rate it again with the same command plus {continue_with}"
        then = "SLURM requeues the job, which rates it again" if requeued else then
        said = f"training had ended, its checkpoints are in {run_dir}/checkpoints; {then}"
        if is_global_zero:  # stderr is line-buffered: the line is out before the exit
            print(
                f"stopped by {stop.signum.name} during the end-of-run table: {said}",
                file=sys.stderr,
            )
        raise SystemExit(128 + stop.signum) from None


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
    part = cfg.features.init_part
    log.info(f"rating the frozen features of {ckpt} ({part}; features.enabled=false skips)")
    how = Extraction(
        device=trainer.strategy.root_device, batch_size=datamodule.eval_batch_size,
        num_workers=getattr(datamodule, "num_workers", 0),  # at most the usable cores
        rank=trainer.global_rank, world_size=trainer.world_size,
        all_gather=trainer.strategy.all_gather,
    )  # fmt: skip
    bounds = {k: cfg.features.get(k) for k in ("train_per_class", "eval_per_class")}
    start = time.monotonic()
    try:
        seed = cfg.get("seed") or 0
        datamodule = rating_data(cfg, datamodule, trainer.strategy)  # or features.data's
        datasets = bounded_splits(datamodule, *bounds.values(), seed)
        sizes = {k: len(v) for k, v in datasets.items()}
        ratings = rate_checkpoint(
            cfg.model.encoder, ckpt, datamodule, cfg.features.init_part,
            cfg.features.baselines, seed, how, **bounds, knn_k=cfg.features.get("knn_k", 20),
            datasets=datasets,
        )  # fmt: skip
    except DataError as error:  # training succeeded: report, do not fail the run
        log.warning(f"frozen features not rated: {error}")
        return metrics, None, {}
    seconds = round(time.monotonic() - start, 1)
    facts = dict(features_seconds=seconds, features_images=sizes, features_ranks=how.world_size)
    if trainer.is_global_zero:
        title = ratings_title(ckpt, datamodule.name, sizes, how.world_size, seconds)
        print_ratings(ratings, title)
    return {**metrics, **protocol_metrics(ratings)}, choices(ratings), facts
