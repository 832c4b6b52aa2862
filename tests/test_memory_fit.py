"""Will the run fit its device (memory_fit/fit.py)? Decided before the run dir from the
estimated peak (memory_fit/estimate.py), for a device of a given size on this CPU."""

import json
import signal

import hydra
import pytest
import torch
from conftest import compose_cfg, run_in_process
from test_ijepa import tiny_ijepa

import trainlab.commands
from trainlab.memory_fit.estimate import GIB, estimate_peak
from trainlab.memory_fit.fit import decide
from trainlab.utils.errors import ConfigError

JOB = ["experiment=ijepa_digits", "data.global_batch_size=64", "model.encoder.depth=2"]


def plan(cfg) -> tuple:
    """memory_fit's policy, device size and margin, as the config gives them."""
    return cfg.memory_fit.policy, cfg.memory_fit.device_gib, cfg.memory_fit.margin


def built(tmp_path, *overrides):
    cfg = compose_cfg(tmp_path, [*JOB, *overrides])
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.setup()
    return cfg, hydra.utils.instantiate(cfg.model), datamodule


def device_between(tmp_path, small: int, large: int) -> float:
    """A device size (GiB) whose budget, less memory_fit's margin, holds the step at
    ``small`` images per device and not at ``large``."""
    cfg, model, datamodule = built(tmp_path)
    estimate = estimate_peak(model, lambda n: torch.randn(n, 1, 16, 16), large)
    middle = (estimate.at(small).peak + estimate.peak) / 2
    return middle / GIB / (1 - cfg.memory_fit.margin)


def test_the_smallest_accumulation_that_fits_is_chosen_and_each_policy_does_what_it_says(tmp_path):
    device = device_between(tmp_path, 16, 32)  # 64 a step and 32 do not fit, 16 does
    cfg, model, datamodule = built(tmp_path, f"memory_fit.device_gib={device}")
    fit = decide(cfg, model, datamodule, 1, *plan(cfg))
    assert (fit.accumulate_grad_batches, fit.grad_checkpointing) == (4, False)
    assert "trainer.accumulate_grad_batches=4, 16 images a step" in fit.reason
    assert "global batch of 64" in fit.reason

    # Twice the device: 64 images a step fit as configured, and nothing changes.
    cfg, model, datamodule = built(tmp_path, f"memory_fit.device_gib={device * 64}")
    fit = decide(cfg, model, datamodule, 1, *plan(cfg))
    assert (fit.accumulate_grad_batches, fit.grad_checkpointing) == (1, False)
    assert not fit.changes(cfg) and "fits" in fit.reason

    cfg, model, datamodule = built(
        tmp_path, f"memory_fit.device_gib={device}", "memory_fit.policy=refuse"
    )
    with pytest.raises(ConfigError, match=r"memory_fit.policy=refuse finds no way"):
        decide(cfg, model, datamodule, 1, *plan(cfg))

    # checkpoint: the checkpointed step at 64 images against a device just above it
    cfg, model, datamodule = built(tmp_path, "model.encoder.grad_checkpointing=true")
    checkpointed = estimate_peak(model, lambda n: torch.randn(n, 1, 16, 16), 64).peak
    plain = estimate_peak(built(tmp_path)[1], lambda n: torch.randn(n, 1, 16, 16), 64).peak
    assert checkpointed < plain  # checkpointing saves more than it recomputes here
    size = (checkpointed + plain) / 2 / GIB / (1 - cfg.memory_fit.margin)
    cfg, model, datamodule = built(
        tmp_path, f"memory_fit.device_gib={size}", "memory_fit.policy=checkpoint"
    )
    fit = decide(cfg, model, datamodule, 1, *plan(cfg))
    assert (fit.accumulate_grad_batches, fit.grad_checkpointing) == (1, True)
    assert model.encoder.grad_checkpointing and model.predictor.grad_checkpointing


@pytest.mark.slow  # four train.py runs of a small I-JEPA
def test_a_run_that_does_not_fit_trains_as_with_the_accumulation_by_hand_and_resumes_so(
    tmp_path, monkeypatch
):
    """The chosen accumulation gives the global batch, the schedules and every step's loss of
    a run given that accumulation by hand, bitwise; stopped and resumed on a device where
    the step would fit whole, the run keeps its choice (memory_fit.json)."""
    device = device_between(tmp_path, 32, 64)  # 2 x 32 images a step
    job = [
        *JOB, "trainer.max_epochs=1", "trainer.limit_train_batches=6", "trainer.limit_val_batches=1",
        "trainer.log_every_n_steps=1", "test=false", "features.enabled=false",
        "extras.print_config=false", f"paths.log_dir={tmp_path}",
    ]  # fmt: skip
    stop = ["+callbacks.stop._target_=signal_at_step.SignalAtStep", "+callbacks.stop.step=3",
            "+callbacks.stop.name=SIGTERM"]  # fmt: skip

    def run(*a):
        return run_in_process(trainlab.commands.train_command, ["train.py", *job, *a], monkeypatch)

    assert run("run_name=fitted", f"memory_fit.device_gib={device}") == 0
    assert run("run_name=by_hand", "trainer.accumulate_grad_batches=2") == 0
    assert run("run_name=cut", f"memory_fit.device_gib={device}", *stop) == 128 + signal.SIGTERM
    assert run("run_name=cut", "resume=true", f"memory_fit.device_gib={device * 100}") == 0
    runs = tmp_path / "train" / "runs"
    facts = {}
    for name in ("fitted", "by_hand", "cut"):
        run_facts = json.loads((runs / name / "metrics.json").read_text())["run"]
        facts[name] = {k: run_facts[k] for k in ("accumulate_grad_batches", "global_batch_size")}
    assert (
        facts["fitted"]
        == facts["by_hand"]
        == facts["cut"]
        == {
            "accumulate_grad_batches": 2,
            "global_batch_size": 64,
        }
    )
    kept = json.loads((runs / "cut" / "memory_fit.json").read_text())
    assert kept == json.loads((runs / "fitted" / "memory_fit.json").read_text())  # as decided
    assert kept["accumulate_grad_batches"] == 2
    assert not (runs / "by_hand" / "memory_fit.json").exists()  # no device size: no decision
    for key in ("train/loss_step", "train/lr"):
        series = {name: logged(runs / name, key) for name in ("fitted", "by_hand", "cut")}
        assert len(series["fitted"]) == 3  # 6 batches, 2 a step
        assert series["fitted"] == series["by_hand"] == series["cut"], series


def logged(run_dir, key: str) -> dict[str, str]:
    """{step: value as written} of a logged key (a resumed run's rows, read once each)."""
    import csv

    with (run_dir / "csv" / "metrics.csv").open() as f:
        return {r["step"]: r[key] for r in csv.DictReader(f) if r.get(key)}


def test_a_resume_with_another_device_size_says_the_run_keeps_its_fit(tmp_path, caplog):
    """resume=true with another memory_fit value keeps the recorded fit (memory_fit/fit.py);
    the log must not claim that the new value applies now."""
    import logging

    from conftest import compose_cfg
    from omegaconf import OmegaConf

    from trainlab.checks import warn_resume_changes

    first = compose_cfg(tmp_path, ["memory_fit.device_gib=80"])
    (tmp_path / "run").mkdir()
    OmegaConf.save(first, tmp_path / "run" / "config.yaml")
    again = compose_cfg(tmp_path, ["memory_fit.device_gib=40", "resume=true"])
    with caplog.at_level(logging.WARNING):
        warn_resume_changes(again)
    (line,) = [r.getMessage() for r in caplog.records if "memory_fit" in r.getMessage()]
    assert "keeps the fit chosen at its first start" in line and "applies now" not in line


def test_the_memory_estimate_leaves_a_stateful_loss_where_it_was(tmp_path):
    """MemoryEstimate calls the method's loss at every start: a loss that moves a buffer (a
    centre, a queue) must find it put back, or a resumed run differs from a straight one."""
    import contextlib
    from types import SimpleNamespace

    from trainlab.callbacks.memory_estimate import MemoryEstimate

    model, _ = tiny_ijepa(tmp_path)
    model.register_buffer("centre", torch.zeros(3))
    loss = model.loss

    def moving_loss(images, generator):
        model.centre.add_(1.0)  # what a centring method does inside its loss
        return loss(images, generator)

    model.loss = moving_loss
    model.example_input_array = torch.zeros(1, 1, 16, 16)  # setup() takes it from the data
    trainer = SimpleNamespace(
        strategy=object(), is_global_zero=True,
        precision_plugin=SimpleNamespace(forward_context=contextlib.nullcontext),
        datamodule=SimpleNamespace(batch_size=8, views=None),
    )  # fmt: skip
    before = {n: b.clone() for n, b in model.named_buffers()}
    estimate = MemoryEstimate()
    estimate.on_train_start(trainer, model)
    assert estimate.estimate["estimated_peak_gib"] > 0
    assert all(torch.equal(b, before[n]) for n, b in model.named_buffers())
