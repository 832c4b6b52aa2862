"""Preflight: the Trainer, the model, its optimizer and the callbacks built, and one real
training batch through the model, before the run dir exists, so that a value no check knows
by name (a predictor whose heads do not divide its width, a view size the patch does not
divide, AdamW's betas, a Trainer's devices) stops the run in one line, exit 2, with nothing
written, instead of failing minutes later inside a library.

The model is the run's own, built once (``build_model``). The Trainer built here is dropped:
it says the world size, which fixes the per-device batch and the scaled learning rates the
model is built with; the run's Trainer is built on its run dir. The batch is read from the
train split without a loader (two samples, collated and normalised as the run's batches are)
and goes through the method's loss in eval mode without gradients, its random draws inside
``fork_rng``: no step, no state of the run changed. Its cost is a two-image forward.
"""

import logging
import re
import time
import warnings

import hydra
import torch
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader

from trainlab.checks.config import dict_nodes
from trainlab.model.self_supervised import SelfSupervised
from trainlab.networks.global_batch_norm import per_rank_batch_norms
from trainlab.utils.errors import ConfigError, UserError, one_line
from trainlab.utils.logging import get_logger
from trainlab.utils.seeding import step_generator

log = get_logger(__name__)
BATCH = 2


def first_batch(datamodule):
    datamodule.prepare_data()  # what Lightning runs before setup: downloads, where asked
    datamodule.setup("fit")
    loader = DataLoader(datamodule.train_set, batch_size=BATCH, num_workers=0)
    return datamodule.on_after_batch_transfer(next(iter(loader)), 0)


def one_step(model, batch, seed: int) -> None:
    """The method's loss on ``batch``, in eval mode, without gradients. The model is the
    run's: every module's mode is put back as it was, and the metrics a training step
    updates (a classifier's train/acc) are reset, so the run's first epoch counts only its
    own batches."""
    from torchmetrics import Metric

    modes = {module: module.training for module in model.modules()}
    model.eval()
    try:
        with torch.no_grad():
            if isinstance(model, SelfSupervised):
                model.loss(batch[0], step_generator(seed, 0, 0))
            else:
                model.training_step(batch, 0)
    finally:
        for module, training in modes.items():
            module.training = training
            if isinstance(module, Metric):
                module.reset()


def built(key: str, node: DictConfig, **kwargs):
    """``node`` instantiated; its constructor's own argument checks (Lightning's, torch's)
    as one line naming ``key``, or the nested node that failed."""
    try:
        return hydra.utils.instantiate(node, **kwargs)
    except Exception as e:
        cause = (e.__cause__ or e) if isinstance(e, InstantiationException) else e
        if isinstance(cause, UserError):
            raise cause from None
        root = key
        if "full_key:" in str(e):  # Hydra's message ends in the node that failed
            key = one_line(e).rsplit("full_key: ", 1)[-1]
        extra = re.search(r"([\w.]+)\(\) got an unexpected keyword argument '(\w+)'", str(cause))
        if isinstance(cause, TypeError) and extra:
            name, arg = extra[1].removesuffix(".__init__"), extra[2]
            where = [  # the node that holds the key: a partial is called inside its parent
                path
                for path, child in dict_nodes(node, root)
                if arg in child and str(child.get("_target_", "")).endswith(name)
            ] or [key]
            raise ConfigError(
                f"{where[0]}.{arg} is not an argument of {name}: drop it (python "
                f"train.py --cfg job -p {where[0]} shows its keys)"
            ) from e
        raise ConfigError(
            f"{key} cannot be built: {type(cause).__name__}: {one_line(cause)}"
        ) from e


def dry_trainer(cfg: DictConfig):
    """The Trainer built without callbacks and loggers, and dropped after: its constructor
    checks devices and num_nodes, and it says the world size and the accumulation as
    Lightning decides them (before any process starts). Loggers are built on the run dir."""
    lightning_log = logging.getLogger("lightning.pytorch")
    level = lightning_log.level
    lightning_log.setLevel(logging.WARNING)  # the Trainer's "GPU available" lines: once, later
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            strategy = cfg.get("strategy")
            return built(
                "trainer",
                cfg.trainer,
                callbacks=[],
                logger=False,
                enable_checkpointing=False,
                strategy=built("strategy", strategy)
                if strategy and "_target_" in strategy
                else "auto",
            )
    finally:
        lightning_log.setLevel(level)


def build_model(cfg: DictConfig):
    """The run's model, from the settled config (run/batch.py), its constructor's errors
    as one line naming the node."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log without a Trainer, and the like
        return built("model", cfg.model)


def check_run_objects(cfg: DictConfig, model) -> None:
    """The optimizer and each callback built once and dropped: AdamW's betas,
    ModelCheckpoint's mode and save_top_k are checked by their own constructors, before
    the run dir exists."""
    optimizer = cfg.model.get("optimizer")
    if isinstance(optimizer, DictConfig) and optimizer.get("_partial_"):
        make = built("model.optimizer", optimizer)  # a partial: the model gives its parameters
        try:
            make([p for p in model.parameters() if p.requires_grad])
        except Exception as e:
            raise ConfigError(
                f"model.optimizer cannot be built: {type(e).__name__}: {one_line(e)}"
            ) from e
    for name, node in (cfg.get("callbacks") or {}).items():
        if isinstance(node, DictConfig) and "_target_" in node:
            built(f"callbacks.{name}", node)


def check_batch_statistics(cfg: DictConfig, model, world_size: int) -> None:
    """On several ranks, an encoder whose BatchNorms normalise one rank's rows trains
    otherwise than one process on the global batch, silently: refused unless asked for by
    name. torch's SyncBatchNorm conversion (``trainer.sync_batchnorm=true``) would replace
    timm's BatchNormAct2d and drop its activation: refused where the model holds one."""
    from timm.layers import BatchNormAct2d

    encoder = getattr(model, "encoder", None)
    if cfg.trainer.get("sync_batchnorm"):
        acts = [n for n, m in model.named_modules() if isinstance(m, BatchNormAct2d)]
        if acts:
            raise ConfigError(
                f"trainer.sync_batchnorm=true would turn the model's {len(acts)} BatchNormAct2d "
                f"({acts[0]}, ...) into torch's SyncBatchNorm, which drops their activation: "
                "drop it; model.encoder.batch_norm=global normalises over all ranks already"
            )
        return
    if world_size < 2 or encoder is None:
        return
    per_rank = per_rank_batch_norms(encoder)
    choice = OmegaConf.select(cfg, "model.encoder.batch_norm", default=None)
    if per_rank and choice != "per_rank":
        # A fork's own encoder has no batch_norm argument to name: its fix is in its code.
        fix = (
            "Set model.encoder.batch_norm=global, trainer.sync_batchnorm=true on GPUs, or "
            "model.encoder.batch_norm=per_rank to keep them"
            if choice is not None
            else "Build them with trainlab.networks.global_batch_norm.to_global_batch_norm, "
            "or set trainer.sync_batchnorm=true on GPUs"
        )
        raise ConfigError(
            f"model.encoder has {len(per_rank)} BatchNorms that normalise each rank's own rows "
            f"({per_rank[0]}, ...): {world_size} ranks would not train as one process. {fix}"
        )


def refuse_images_below_the_stride(cfg: DictConfig, model) -> None:
    """A timm CNN whose total stride is above the image size would train on 1 x 1 maps of
    padding from some stage on: it would run, and learn little. Refused, with the size."""
    size = OmegaConf.select(cfg, "data.image_size")
    if not isinstance(size, int):
        return
    for module in model.modules():
        info = getattr(module, "feature_info", None)
        reduction = info[-1].get("reduction") if isinstance(info, list) and info else None
        if isinstance(reduction, int) and size < reduction:
            name = getattr(module, "default_cfg", {}).get("architecture", type(module).__name__)
            raise ConfigError(
                f"data.image_size={size} is below the stride of {name} ({reduction}): its "
                f"last stages would see maps of padding; give data.image_size={reduction} or more"
            )


def preflight(cfg: DictConfig, datamodule, model, world_size: int = 1) -> float:
    """Raise a ConfigError (one line) if the model's optimizer or a callback cannot be built,
    or the model cannot take one real training batch, and a DataError if the train split
    holds no full batch per device; return the seconds it took."""
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log without a Trainer, and the like
        check_run_objects(cfg, model)
        if not getattr(datamodule, "preflight_batch", True):
            return time.perf_counter() - start
        try:
            batch = first_batch(datamodule)
            datamodule.refuse_no_full_batch(world_size)
            one_step(model, batch, cfg.get("seed") or 0)
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
    log.info(f"preflight: one batch of {BATCH} through the model in {seconds:.2f} s")
    return seconds
