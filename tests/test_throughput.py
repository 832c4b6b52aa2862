"""The throughput part: samples/s, tokens/s, TFLOP/s and MFU, logged at each interval and in
the run summary after the first interval. I-JEPA's run with its tokens and MFU is in
test_ijepa.py (I-JEPA needs this part)."""

import json
from types import SimpleNamespace

import pytest
import torch
from conftest import FAST, compose_cfg

from trainlab.callbacks import throughput
from trainlab.callbacks.throughput import Throughput
from trainlab.training import train


def test_rates_are_work_over_time():
    rates = Throughput(peak_tflops=2.0).rates(
        {"samples": 64, "tokens": 1000, "flops": 4e12}, seconds=2.0, world_size=2
    )
    assert rates == pytest.approx(
        {
            "train/samples_per_s": 32.0,
            "train/tokens_per_s": 500.0,
            "train/tflops_per_s": 2.0,
            "train/mfu": 0.5,  # 1 TFLOP/s per device of a 2 TFLOP/s peak
        }
    )
    assert set(Throughput().rates({"samples": 8, "tokens": 0, "flops": 0}, 1.0, 1)) == {
        "train/samples_per_s"  # a module that counts no tokens or FLOPs: samples/s only
    }


def test_run_summary_rates_leave_out_the_first_interval(monkeypatch):
    """Compilation fills the first logged interval: the summary's rates start after it."""
    clock = iter([0.0, 10.0, 11.0, 12.0, 12.0])  # start, three logged steps, end
    monkeypatch.setattr(throughput.time, "perf_counter", lambda: next(clock))
    trainer = SimpleNamespace(
        world_size=1,
        _logger_connector=SimpleNamespace(should_update_logs=True),
        strategy=SimpleNamespace(root_device=torch.device("cpu")),
    )
    module = SimpleNamespace(step_tokens=100, step_flops=0, log_dict=lambda rates: None)
    stats = Throughput()
    stats.on_train_start(trainer, module)
    for _ in range(3):
        stats.on_train_batch_end(trainer, module, None, (torch.zeros(64, 1), None), 0)
    stats.on_train_end(trainer, module)
    summary = stats.summary()
    # the last two steps in the last two seconds, not 3 x 64 samples in 12 seconds
    assert summary["train_samples_per_s"] == 64.0 and summary["train_tokens_per_s"] == 100.0


def test_peak_tflops_is_dense_and_finds_the_h200(monkeypatch):
    """Lightning's table lacks "NVIDIA H200" (it names form factors) and lists its sparse
    peak; an H100 SXM it knows, at its dense peak."""
    device = torch.device("cuda", 0)
    for name, peak in [("NVIDIA H200", 989.4), ("NVIDIA H100 80GB HBM3", 989.4)]:
        monkeypatch.setattr(throughput.torch.cuda, "get_device_name", lambda d, n=name: n)
        assert throughput.peak_tflops(device, torch.bfloat16) == pytest.approx(peak)


def test_the_default_job_reports_samples_per_second_and_no_mfu(tmp_path, capsys):
    """VICReg counts no tokens or FLOPs (I-JEPA does: test_ijepa.py): samples/s in
    metrics.json and the summary, and no MFU even with a peak given. The summary shows the
    fit's rate once: the last interval's, logged, stays in metrics.json."""
    overrides = [*FAST, "peak_tflops=0.5", "test=false", "trainer.log_every_n_steps=1"]
    train(compose_cfg(tmp_path, overrides))
    results = json.loads((tmp_path / "run" / "metrics.json").read_text())
    run = results["run"]
    assert run["train_samples_per_s"] > 0 and "train_mfu" not in run
    assert "train_tokens_per_s" not in run and run["fit_seconds"] > 0
    out = capsys.readouterr().out
    assert "train samples/s" in out and "MFU" not in out
    assert "train/samples_per_s" in results["metrics"] and "train/samples_per_s" not in out
