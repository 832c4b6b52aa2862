"""Preflight: build the model and put one real training batch through it before the run dir
exists, so that a value no check knows by name (a predictor whose heads do not divide its
width, a view larger than the image, a loss that cannot read the batch) stops the run in one
line, exit 2, with nothing written, instead of failing minutes later inside a library.

The model built here is thrown away: its random draws happen inside ``fork_rng``, so the run's
own model starts from the same weights as without preflight. The batch is read from the train
split without a loader (two samples, collated and normalised as the run's batches are) and
goes through the method's loss in eval mode without gradients: no step, no state of the run
changed. Its cost is one extra model build and a two-image forward (results: README).
"""

import time
import warnings

import hydra
import torch
from hydra.errors import InstantiationException
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from trainlab.model.networks.masks import step_generator
from trainlab.model.self_supervised import SelfSupervised
from trainlab.utils.errors import ConfigError, UserError, one_line
from trainlab.utils.logging import get_logger

log = get_logger(__name__)
BATCH = 2


def built_model(cfg: DictConfig):
    try:
        return hydra.utils.instantiate(cfg.model)
    except InstantiationException as e:
        cause = e.__cause__ or e
        if isinstance(cause, UserError):
            raise cause from None
        # Hydra's message ends in "full_key: model.predictor": the node that failed.
        key = one_line(e).removeprefix("full_key: ") if "full_key:" in str(e) else "model"
        raise ConfigError(
            f"{key} cannot be built: {type(cause).__name__}: {one_line(cause)}"
        ) from e


def first_batch(datamodule):
    datamodule.prepare_data()  # what Lightning runs before setup: downloads, where asked
    datamodule.setup("fit")
    loader = DataLoader(datamodule.train_set, batch_size=BATCH, num_workers=0)
    return datamodule.on_after_batch_transfer(next(iter(loader)), 0)


def one_step(model, batch, seed: int) -> None:
    """The method's loss on ``batch``, in eval mode, without gradients."""
    model.eval()
    with torch.no_grad():
        if isinstance(model, SelfSupervised):
            model.loss(batch[0], step_generator(seed, 0, 0))
        else:
            model.training_step(batch, 0)


def preflight(cfg: DictConfig, datamodule) -> float:
    """Raise a ConfigError (one line) if the model cannot be built or cannot take one real
    training batch; return the seconds it took."""
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log without a Trainer, and the like
        model = built_model(cfg)
        if not getattr(datamodule, "preflight_batch", True):
            return time.perf_counter() - start
        try:
            one_step(model, first_batch(datamodule), cfg.get("seed") or 0)
        except UserError:
            raise
        except Exception as e:
            raise ConfigError(
                f"the first training batch ({type(datamodule).__name__}, {BATCH} images) "
                f"fails in {type(model).__name__}: {type(e).__name__}: {one_line(e)}; check "
                "the data and model settings it names (data.views, data.image_size, "
                "data.num_classes, model.*)"
            ) from e
    seconds = time.perf_counter() - start
    log.info(f"preflight: model built and one batch of {BATCH} run in {seconds:.2f} s")
    return seconds
