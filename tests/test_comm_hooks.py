"""Comm hooks (strategy=ddp_powersgd, ddp_fp16_compress, ddp_bf16_compress): they run on gloo
and report their savings, I-JEPA trains under PowerSGD from train.py, and the combinations
torch rejects are refused in one line."""

import json

import pytest
from conftest import (
    RANK_CONSISTENCY,
    TWO_CPU_RANKS,
    assert_one_clear_line,
    logged_series,
    run_cli,
    run_harness,
    run_train,
)


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """tests/comm_hooks_harness.py: a Trainer per hook in one 2-rank job; one report per rank."""
    return run_harness("comm_hooks_harness", tmp_path_factory.mktemp("comm_hooks_harness"))


@pytest.mark.slow  # the 2-process harness: make test-slow, which CI runs
@pytest.mark.parametrize("hook", ["fp16_compress", "bf16_compress", "powersgd", "powersgd_fp16"])
def test_comm_hooks_run_on_gloo_and_report_their_savings(harness, hook):
    for report in harness:
        stats = report[hook]
        assert stats["calls"] > stats["steps"] > 0  # ran, on several buckets per step
        assert stats["last_loss"] < 0.2 * stats["first_loss"]
        if hook == "powersgd":
            assert stats["iter"] == stats["steps"]  # PowerSGD's own counter advanced
            assert stats["compression_rate"] > 2
            assert stats["reduced_dtypes"] == ["torch.float32"]  # P and Q, full precision
        elif hook == "powersgd_fp16":  # strategy.compress_wrapper=fp16 around PowerSGD
            assert stats["iter"] == stats["steps"]
            assert stats["compression_rate"] > 4  # PowerSGD's rate, twice over
            assert stats["reduced_dtypes"] == ["torch.float16"]
        else:
            assert stats["compression_rate"] == pytest.approx(2.0)
            # what is really all-reduced: 2-byte floats, not the fp32 gradients
            wire = {"fp16_compress": "torch.float16", "bf16_compress": "torch.bfloat16"}[hook]
            assert stats["reduced_dtypes"] == [wire]


@pytest.mark.slow  # 77 s of 2-process run: make test-slow (CI runs it after make test)
def test_ijepa_ddp_powersgd_bf16_accumulation_from_train_py(tmp_path):
    """I-JEPA from train.py: PowerSGD on several buckets under bf16-mixed with accumulation
    trains (the loss falls), compresses, and leaves every rank with identical weights, having
    drawn identical masks at every step."""
    result = run_cli(
        "train.py",
        *TWO_CPU_RANKS,
        "experiment=ijepa_digits",
        "strategy=ddp_powersgd",
        "strategy.powersgd.start_powerSGD_iter=2",
        "strategy.bucket_cap_mb=1",  # several buckets (the case that aborted gloo)
        "trainer.precision=bf16-mixed",
        "trainer.accumulate_grad_batches=2",
        "trainer.max_epochs=3",
        "trainer.limit_train_batches=8",
        "trainer.limit_val_batches=3",
        "trainer.limit_test_batches=2",
        "trainer.log_every_n_steps=1",
        "model.encoder.depth=2",
        "extras.print_config=false",
        "features.enabled=false",  # the end-of-run rating: test_train covers it
        RANK_CONSISTENCY,
        f"paths.log_dir={tmp_path}",
        "run_name=ddp",
        cwd=tmp_path,
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "train" / "runs" / "ddp"
    report = json.loads((run_dir / "rank_consistency.json").read_text())
    assert report["world_size"] == 2 and report["consistent"], report
    # "masks": every step's masks, drawn by each rank from the module's step generator.
    assert {"encoder", "target_encoder", "predictor", "online", "masks"} <= set(report["checksums"])
    # The EMA target moved away from where it started (it would stay there if the EMA never
    # ran), on both ranks alike, and did not become a copy of the online encoder.
    checksums, initial = report["checksums"], report["initial_checksums"]
    assert checksums["target_encoder"][0] != initial["target_encoder"]
    assert checksums["target_encoder"][0] != checksums["encoder"][0]
    results = json.loads((run_dir / "metrics.json").read_text())
    run, metrics = results["run"], results["metrics"]
    assert run["world_size"] == 2 and run["accumulate_grad_batches"] == 2
    assert run["global_batch_size"] == 4 * run["batch_size_per_device"]
    assert metrics["comm/compression_rate"] > 2
    assert metrics["comm/powersgd_iter"] == 12  # 3 epochs x 8 batches / 2 accumulation
    for key in ("val/probe_acc", "val/knn_acc", "val/rankme", "test/probe_acc"):
        assert key in metrics, key
    steps = logged_series(run_dir, "train/loss_step")
    assert len(steps) == 12 and sum(steps[-3:]) < sum(steps[:3]), steps
    assert [p.name for p in (tmp_path / "train" / "runs").iterdir()] == ["ddp"]


@pytest.mark.slow  # 5 s: make test-slow, which CI runs
@pytest.mark.parametrize(
    "overrides, needles",
    [
        (["strategy=ddp_powersgd", "strategy.comm_hook=batched_powersgd"], ["batched_powersgd"]),
        (
            ["strategy=ddp_powersgd", "strategy.powersgd.start_powerSGD_iter=1"],
            ["start_powerSGD_iter"],
        ),
        (["strategy=ddp_fp16_compress", "strategy.compress_wrapper=bf16"], ["compress_wrapper"]),
    ],
)
def test_hook_settings_torch_rejects_are_refused(tmp_path, monkeypatch, capfd, overrides, needles):
    """Refused before any process starts or any run dir is written: one line, exit 2."""
    code, err = run_train(
        tmp_path, monkeypatch, capfd, "trainer.accelerator=cpu", *overrides, "run_name=bad"
    )
    assert code == 2, err[-2000:]
    assert_one_clear_line(err, *needles)
    assert not (tmp_path / "logs" / "train" / "runs" / "bad").exists()
