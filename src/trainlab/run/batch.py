"""Batch accounting: the per-device batch from a global batch, and LR scaling with it."""

import copy

from omegaconf import DictConfig, ListConfig, OmegaConf

from trainlab.run.metrics_file import batch_facts
from trainlab.utils.errors import ConfigError
from trainlab.utils.logging import get_logger

log = get_logger(__name__)


def per_device_batch(global_batch_size: int, world_size: int, accumulate: int) -> int:
    """The per-device batch that keeps ``global_batch_size`` whatever the device count."""
    per_step = world_size * accumulate
    if global_batch_size % per_step:
        raise ConfigError(
            f"data.global_batch_size={global_batch_size} does not divide over {world_size} "
            f"device(s) x {accumulate} accumulation step(s): choose a multiple of {per_step}, "
            f"or set data.global_batch_size=null and data.batch_size per device"
        )
    return global_batch_size // per_step


LR_RULES = ("none", "linear", "sqrt")


def scale_learning_rates(cfg: DictConfig, global_batch_size: int) -> float:
    """Multiply every learning rate named in ``cfg.lr_scaling.keys`` (numbers or lists) by
    (global batch / reference batch) for ``linear``, or its square root for ``sqrt``.

    Runs before the model is built, on every rank alike; returns the factor applied.
    """
    scaling = cfg.get("lr_scaling") or {"rule": "none"}
    rule = scaling.get("rule", "none")
    if rule not in LR_RULES:
        raise ConfigError(f"lr_scaling.rule={rule!r} is not one of {', '.join(LR_RULES)}")
    ratio = global_batch_size / scaling.get("reference_batch", global_batch_size)
    factor = {"none": 1.0, "linear": ratio, "sqrt": ratio**0.5}[rule]
    if factor != 1.0:
        # Read every rate first (resolving interpolations: a key that points at another
        # scaled key), then write: nothing is scaled twice.
        values = {key: OmegaConf.select(cfg, key) for key in scaling.get("keys", [])}
        values = {k: list(v) if isinstance(v, ListConfig) else v for k, v in values.items()}
        for key, value in values.items():
            if isinstance(value, list):
                OmegaConf.update(cfg, key, [v * factor for v in value])
            elif value is not None:
                OmegaConf.update(cfg, key, value * factor)
    return factor


def batch_for_world(cfg: DictConfig, trainer, datamodule) -> tuple[dict, DictConfig]:
    """The per-device batch from data.global_batch_size (set on the datamodule), and the
    config the model is built from: a copy of ``cfg`` with the learning rates scaled to the
    global batch (lr_scaling), so the checked config stays as composed and a child rank,
    which starts from it, scales once too. ``trainer`` gives the world size and the
    accumulation, as Lightning decides them."""
    if datamodule.global_batch_size:
        datamodule.batch_size = per_device_batch(
            datamodule.global_batch_size, trainer.world_size, trainer.accumulate_grad_batches
        )
    facts = batch_facts(trainer, datamodule.batch_size)
    settled = copy.deepcopy(cfg)
    facts["lr_scale"] = scale_learning_rates(settled, facts["global_batch_size"])
    log.info(
        f"batch: {facts['batch_size_per_device']} per device x {facts['world_size']} "
        f"device(s) x {facts['accumulate_grad_batches']} accumulation = "
        f"{facts['global_batch_size']} per optimizer step; learning rates x{facts['lr_scale']:.4g} "
        f"(lr_scaling.rule={OmegaConf.select(cfg, 'lr_scaling.rule', default='none')})"
    )
    return facts, settled
