"""Batch accounting: the per-device batch from a global batch, devices, nodes and accumulation."""

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
