"""Batch accounting: per-device batch from a global batch, and LR scaling with the batch."""

import pytest

from trainlab.run.batch import per_device_batch, scale_learning_rates
from trainlab.utils.errors import ConfigError


def test_global_batch_splits_over_devices_nodes_and_accumulation():
    assert per_device_batch(2048, world_size=16, accumulate=1) == 128
    assert per_device_batch(2048, world_size=8, accumulate=4) == 64
    with pytest.raises(ConfigError, match="multiple of 24"):
        per_device_batch(2048, world_size=6, accumulate=4)


@pytest.mark.parametrize("rule, factor", [("none", 1.0), ("linear", 4.0), ("sqrt", 2.0)])
def test_lr_scaling_rules_multiply_every_named_rate(cfg_factory, rule, factor):
    cfg = cfg_factory(f"lr_scaling.rule={rule}", "lr_scaling.reference_batch=64")
    rates = [cfg.model.start_lr, cfg.model.optimizer.lr, cfg.model.final_lr]
    assert scale_learning_rates(cfg, global_batch_size=256) == factor
    scaled = [cfg.model.start_lr, cfg.model.optimizer.lr, cfg.model.final_lr]
    assert scaled == pytest.approx([v * factor for v in rates])  # each once


def test_unknown_lr_scaling_rule_is_refused(cfg_factory):
    with pytest.raises(ConfigError, match="lr_scaling.rule"):
        scale_learning_rates(cfg_factory("lr_scaling.rule=cubic"), global_batch_size=64)


def test_sweeping_model_optimizer_lr_moves_the_peak(cfg_factory):
    """A sweep `model.optimizer.lr=1e-3,3e-4` changes the schedule's peak."""
    from hydra.utils import instantiate

    peaks = []
    for lr in (1e-3, 3e-4):
        cfg = cfg_factory(f"model.optimizer.lr={lr}")
        peaks.append(instantiate(cfg.model).peak_lr)
    assert peaks == pytest.approx([1e-3, 3e-4])
