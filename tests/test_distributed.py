"""Distributed training on 2 CPU (gloo) processes. Each test is one 2-process job (most of
its time is start-up), so each checks several things at once."""

import json
import subprocess

import pytest
import torch
from conftest import (
    FAST,
    RANK_CONSISTENCY,
    ROOT,
    TWO_CPU_RANKS,
    compose_cfg,
    logged_series,
    run_cli,
    run_harness,
    run_torchrun_nodes,
)
from hydra.utils import instantiate
from omegaconf import OmegaConf

from trainlab.evaluation.checkpoint import rate_checkpoint


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """tests/ddp_harness.py: several Trainers in one 2-rank job; one report per rank."""
    return run_harness("ddp_harness", tmp_path_factory.mktemp("harness"))


@pytest.mark.slow  # the 2-process harness, 18 s: make test-slow, which CI runs
def test_each_rank_sees_a_disjoint_shard_reshuffled_every_epoch(harness):
    """ImageDataModule.train_dataloader() on 2 ranks (trainlab's SeededSampler)."""
    (seen0, seen1) = (report["seen_workers0"] for report in harness)
    for epoch in ("0", "1"):
        assert not set(seen0[epoch]) & set(seen1[epoch])
        assert sorted(seen0[epoch] + seen1[epoch]) == list(range(40))
    assert seen0["0"] != seen0["1"]  # a new order every epoch
    assert set(seen0["0"]) != set(seen0["1"])  # and a new split of the samples


@pytest.mark.slow  # the 2-process harness (17 s): make test-slow, which CI runs
def test_augmentation_does_not_depend_on_the_worker_count(harness):
    """The README's claim: every sample draws the same augmentation with 0 or 2 workers, on
    each rank, and a different one in the next epoch."""
    for report in harness:
        assert report["seen_workers2"] == report["seen_workers0"]
        assert report["draws_workers2"] == report["draws_workers0"]
        draws = report["draws_workers0"]
        assert len(set(draws.values())) == len(draws)  # all distinct, epochs included


@pytest.mark.slow  # the 2-process harness (17 s): make test-slow, which CI runs
def test_two_ranks_with_accumulation_update_like_one_big_batch(harness):
    # 2 ranks x batch 8 x accumulate 2 against 1 process x batch 32, one SGD step.
    for report in harness:
        assert report["accumulation_diff"] < 1e-6, report["accumulation_diff"]


@pytest.mark.slow  # a 2-process train.py run (25 s): make test keeps to its 4 minutes
def test_a_ddp_step_sends_the_gradients_and_little_else(tmp_path):
    """A 2-rank ViT-Tiny I-JEPA from train.py: one steady optimizer step, profiled by
    CommCounter, sends the gradients' bytes (all-reduced), the monitors' gather, var_cov's
    gather of the global batch and its backward, the step's loss, and nothing else: no buffer broadcast (the
    bank), no per-batch agreement of the stop signal. Its end-of-run feature table, sharded
    over the 2 ranks and bounded per class, reads what one process reads on the same
    checkpoint and images."""
    result = run_cli(
        "train.py",
        *TWO_CPU_RANKS,
        "experiment=ijepa_digits",
        "model.encoder.depth=null",  # ViT-Tiny's own 12 blocks
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=5",
        "trainer.limit_val_batches=1",
        "test=false",
        "extras.print_config=false",
        "features.baselines=false",
        "features.train_per_class=30",
        "features.eval_per_class=10",
        f"paths.log_dir={tmp_path}",
        "run_name=comm",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = json.loads((tmp_path / "train" / "runs" / "comm" / "metrics.json").read_text())["run"]
    cfg = compose_cfg(tmp_path, ["experiment=ijepa_digits", "model.encoder.depth=null"])
    model = instantiate(cfg.model)
    grad_bytes = sum(4 * p.numel() for p in model.parameters() if p.requires_grad)
    assert run["comm_bytes_per_step"] == pytest.approx(grad_bytes, rel=0.05), run
    # The gradients' all-reduce, and the backward of var_cov's gather of the pooled context
    # (the global batch's statistics: a reduce-scatter of B x D floats, inside the 5 %, which
    # gloo runs, and torch's profiler records, as an all-reduce).
    assert run["comm_collectives_per_step"].keys() == {"all_reduce"}, run
    assert 0 < run["other_comm_bytes_per_step"] < 0.05 * run["comm_bytes_per_step"], run
    # the monitors' features and labels, var_cov's pooled context; the step's loss for the
    # epoch's train/loss (model/epoch_mean.py: one float64)
    assert run["other_comm_collectives_per_step"] == {"all_gather": 3, "all_reduce": 1}, run
    assert "gradients sent/step, per rank (MiB)" in result.stdout
    assert f"{run['comm_bytes_per_step'] / 2**20:.4g}" in result.stdout
    results = json.loads((tmp_path / "train" / "runs" / "comm" / "metrics.json").read_text())
    assert run["features_ranks"] == 2 and run["features_images"]["train"] == 300, run
    assert run["features_images"]["val"] <= 100 and run["features_images"]["test"] <= 100
    ckpt = str(tmp_path / "train" / "runs" / "comm" / "checkpoints" / "last.ckpt")
    ratings = rate_checkpoint(
        cfg.model.encoder, ckpt, instantiate(cfg.data), baselines=False, seed=42,
        train_per_class=30, eval_per_class=10,
    )  # fmt: skip
    alone = ratings["features"]
    assert results["metrics"]["features/linear_acc"] == pytest.approx(
        alone.linear.test_acc, abs=0.02
    )
    assert results["metrics"]["features/knn_acc"] == pytest.approx(alone.knn_acc, abs=0.02)


@pytest.mark.slow  # a 2-process eval.py: make test-slow (CI runs it after make test)
def test_eval_on_two_ranks_reads_what_one_process_reads(tmp_path):
    """One checkpoint through eval.py on 1 process and on 2 CPU ranks: the same test metrics,
    RankMe and feat_std over every test image too, where the ranks hold 180 and 179 of the
    359."""
    from trainlab.eval import evaluate
    from trainlab.training import train

    train(compose_cfg(tmp_path / "t", FAST))
    ckpt = tmp_path / "t" / "run" / "checkpoints" / "last.ckpt"
    alone = evaluate(compose_cfg(tmp_path / "one", [f"ckpt_path={ckpt}"], "eval"))
    result = run_cli(
        "eval.py", f"ckpt_path={ckpt}", *TWO_CPU_RANKS, f"paths.log_dir={tmp_path}",
        "run_name=two", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    two = json.loads((tmp_path / "eval" / "runs" / "two" / "metrics.json").read_text())
    assert set(alone) == set(two["metrics"]) >= {"test/feat_std", "test/rankme"}
    for key, value in alone.items():
        assert two["metrics"][key] == pytest.approx(value, rel=1e-5), key


@pytest.mark.slow  # a 2-process run: make test-slow (CI runs it after make test)
def test_a_rank_failing_alone_saves_its_own_state_and_the_job_ends(tmp_path):
    """Rank 1 raises at step 2 while rank 0 goes on: rank 1 writes on_exception.rank1.ckpt
    without a collective (Lightning's OnExceptionCheckpoint would wait in a barrier for
    rank 0), and the job ends within the timeout instead of hanging."""
    import torch

    result = run_cli(
        "train.py",
        *TWO_CPU_RANKS,
        "strategy=ddp",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=6",
        "trainer.limit_val_batches=2",
        "model.encoder.depth=1",
        "extras.print_config=false",
        "features.enabled=false",
        "+callbacks.fail._target_=signal_at_step.RaiseAtStep",
        "+callbacks.fail.step=2",
        f"paths.log_dir={tmp_path}",
        "run_name=alone",
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT / "tests")},
        timeout=300,
    )
    assert result.returncode != 0
    checkpoints = tmp_path / "train" / "runs" / "alone" / "checkpoints"
    state = torch.load(checkpoints / "on_exception.rank1.ckpt", weights_only=True)
    assert state["global_step"] == 2
    assert (
        "rank 1 failed alone at step 2"
        in result.stderr + (checkpoints.parent / "train.log").read_text()
    )


@pytest.mark.slow  # a 2-process run: make test-slow (CI runs it after make test)
def test_multirun_with_ddp_runs_every_job_on_two_ranks(tmp_path):
    """The issue's command: each job gets 2 ranks started from its own composed config,
    its own run dir, the same weights on both ranks; no extra dirs, no leftover processes."""
    result = run_cli(
        "train.py",
        "-m",
        "experiment=ijepa_digits",
        "model.optimizer.lr=1e-3,3e-4",
        *TWO_CPU_RANKS,
        *FAST,
        "model.encoder.depth=2",
        RANK_CONSISTENCY,
        f"paths.log_dir={tmp_path}",
        cwd=tmp_path,
        timeout=500,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep,) = (tmp_path / "train" / "multiruns").iterdir()
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0", "1"]
    assert not (tmp_path / "train" / "runs").exists()
    for job, lr in zip(jobs, (1e-3, 3e-4), strict=True):
        assert OmegaConf.load(job / ".rank_config.yaml").model.optimizer.lr == lr
        assert json.loads((job / "metrics.json").read_text())["run"]["world_size"] == 2
        report = json.loads((job / "rank_consistency.json").read_text())
        assert report["world_size"] == 2 and report["consistent"], report
    leftover = subprocess.run(
        ["pgrep", "-f", f"trainlab.child_rank {tmp_path}"], capture_output=True
    )
    assert leftover.returncode == 1, leftover.stdout  # pgrep: no process matched


@pytest.mark.slow  # two 2-process jobs: make test-slow (CI runs it after make test)
def test_two_nodes_on_loopback_train_like_one_node_with_two_processes(tmp_path):
    """Two torchrun agents as nodes 0 and 1 (one process each, rendezvous on 127.0.0.1) give
    the same losses and weights, bit for bit, as one agent with 2 processes."""
    job = [
        "trainer.accelerator=cpu",
        *FAST,
        "trainer.log_every_n_steps=1",
        f"paths.log_dir={tmp_path}",
    ]
    run_torchrun_nodes([*job, "run_name=two_nodes"], nodes=2, procs_per_node=1)
    run_torchrun_nodes([*job, "run_name=one_node"], nodes=1, procs_per_node=2)
    two_nodes, one_node = (tmp_path / "train" / "runs" / n for n in ("two_nodes", "one_node"))
    for run in (two_nodes, one_node):
        facts = json.loads((run / "metrics.json").read_text())["run"]
        assert facts["world_size"] == 2
    assert json.loads((two_nodes / "metrics.json").read_text())["run"]["num_nodes"] == 2
    losses = logged_series(two_nodes, "train/loss_step")
    assert len(losses) == 3 and losses == logged_series(one_node, "train/loss_step")
    a, b = (
        torch.load(r / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        for r in (two_nodes, one_node)
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_ddp_is_built_on_the_stream_that_trains(monkeypatch):
    """Lightning builds DDP inside a side CUDA stream; every backward then warns that the
    AccumulateGrad node's stream does not match, and syncs the two. trainlab's strategy
    builds it where the steps run (on a CUDA device: recorded here with CPU stand-ins)."""
    import trainlab.strategy.ddp as ddp

    entered, built = [], {}
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: "side stream")
    monkeypatch.setattr(torch.cuda, "stream", lambda s: entered.append(s))
    monkeypatch.setattr(ddp, "DistributedDataParallel", lambda **kwargs: built.update(kwargs))
    strategy = ddp.DDPStrategy(bucket_cap_mb=5)
    monkeypatch.setattr(strategy, "determine_ddp_device_ids", lambda: [0])  # a CUDA device
    model = torch.nn.Linear(2, 2)
    strategy.wrap_model(model)
    assert built == {"module": model, "device_ids": [0], "bucket_cap_mb": 5}
    assert entered == []
