"""I-JEPA under DDP on 2 CPU (gloo) processes, launched by Lightning from train.py.

One run (about 30 s, mostly start-up) checks several things at once: the job finishes,
both ranks end with identical encoder, predictor, target encoder and probe weights, the
online evaluation (features gathered across ranks) is logged, and only rank 0 writes.
"""

import json

from conftest import run_cli


def test_ijepa_ddp_two_cpu_processes(tmp_path):
    result = run_cli(
        "train.py",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "strategy=ddp",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=4",
        "trainer.limit_val_batches=3",
        "trainer.limit_test_batches=2",
        "model.encoder.depth=2",
        "extras.print_config=false",
        "+callbacks.rank_consistency._target_=trainlab.callbacks.rank_consistency.RankConsistency",
        f"paths.log_dir={tmp_path}",
        "run_name=ddp",
        cwd=tmp_path,
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "train" / "runs" / "ddp"
    report = json.loads((run_dir / "rank_consistency.json").read_text())
    assert report["world_size"] == 2 and report["consistent"], report
    assert {"encoder", "target_encoder", "predictor", "online"} <= set(report["checksums"])
    results = json.loads((run_dir / "metrics.json").read_text())
    assert results["run"]["world_size"] == 2
    assert results["run"]["global_batch_size"] == 2 * results["run"]["batch_size_per_device"]
    for key in ("val/probe_acc", "val/knn_acc", "val/rankme", "test/probe_acc", "train/loss"):
        assert key in results["metrics"], key
    # The EMA target moved away from its initial copy on both ranks alike.
    assert report["checksums"]["target_encoder"][0] != report["checksums"]["encoder"][0]
    # Child ranks made no run dirs of their own.
    assert [p.name for p in (tmp_path / "train" / "runs").iterdir()] == ["ddp"]
