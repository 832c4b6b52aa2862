"""The Trainer of a run: the config's callbacks, loggers and strategy, plus trainlab's own."""

from pathlib import Path

import hydra
import lightning as L
from omegaconf import DictConfig

from trainlab.callbacks.comm_count import CommCounter
from trainlab.callbacks.run_stats import RunStats
from trainlab.callbacks.seed_each_step import SeedEachStep
from trainlab.run.instantiate import (
    instantiate_callbacks,
    instantiate_loggers,
    instantiate_strategy,
)
from trainlab.trainer.matmul_precision import set_matmul_precision
from trainlab.utils.logging import get_logger

log = get_logger(__name__)


def build_trainer(cfg: DictConfig, run_dir: Path) -> tuple[L.Trainer, list]:
    """The Trainer with the config's callbacks, loggers and strategy, plus trainlab's own
    (and its loggers). Any callback with a ``summary()`` adds to metrics.json's ``run``
    (run/fit_record.py)."""
    own = [RunStats(), CommCounter()]
    # SeedEachStep always: without it a resumed run would draw other random numbers.
    callbacks = [*instantiate_callbacks(cfg.get("callbacks")), *own, SeedEachStep()]
    loggers = instantiate_loggers(cfg.get("logger"), run_dir)
    set_matmul_precision(cfg.matmul_precision)
    trainer: L.Trainer = hydra.utils.instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=loggers or False,
        strategy=instantiate_strategy(cfg.get("strategy")),
    )
    return trainer, loggers
