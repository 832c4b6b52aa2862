"""Batch accounting: the per-device batch from a global batch, and LR scaling with it."""

from omegaconf import DictConfig, ListConfig, OmegaConf

from trainlab.utils.errors import ConfigError


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
        # Read every rate first (resolving interpolations such as I-JEPA's peak LR, which
        # points at model.optimizer.lr), then write: nothing is scaled twice.
        values = {key: OmegaConf.select(cfg, key) for key in scaling.get("keys", [])}
        values = {k: list(v) if isinstance(v, ListConfig) else v for k, v in values.items()}
        for key, value in values.items():
            if isinstance(value, list):
                OmegaConf.update(cfg, key, [v * factor for v in value])
            elif value is not None:
                OmegaConf.update(cfg, key, value * factor)
    return factor
