"""Every experiment composes, and its model, datamodule and trainer instantiate on CPU."""

import hydra
import pytest
from conftest import EXPERIMENTS

from trainlab.utils.config_checks import check_config


def test_there_are_experiments():
    assert "digits_classifier" in EXPERIMENTS


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_instantiates(cfg_factory, experiment):
    cfg = cfg_factory(f"experiment={experiment}", "trainer.accelerator=cpu")
    check_config(cfg)
    assert cfg.data._target_ and cfg.model._target_
    datamodule = hydra.utils.instantiate(cfg.data)
    model = hydra.utils.instantiate(cfg.model)
    trainer = hydra.utils.instantiate(cfg.trainer, logger=False)
    assert datamodule.batch_size > 0
    assert sum(p.numel() for p in model.parameters()) > 0
    assert trainer.max_epochs == cfg.trainer.max_epochs


@pytest.mark.parametrize("group", ["data", "logger", "callbacks", "trainer", "strategy", "debug"])
def test_every_option_of_a_group_composes(cfg_factory, group):
    from conftest import CONFIGS

    for option in sorted(p.stem for p in (CONFIGS / group).glob("*.yaml")):
        overrides = [f"{group}={option}"]
        if option in ("imagefolder", "imagenet") or group == "data" and option == "imagefolder":
            overrides.append("data.num_classes=10")
        cfg = cfg_factory(*overrides)
        check_config(cfg)
