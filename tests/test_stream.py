"""Streaming shards (litdata): made from an image folder they round-trip exactly, skip and
list bad files, and train.py trains from them with data=stream."""

import io
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import FAST, ROOT, run_in_process
from PIL import Image

import trainlab.train


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """A 3-class folder of random PNGs (one broken file, one stray text file) and its shards."""
    root = tmp_path_factory.mktemp("stream")
    rng = np.random.default_rng(0)
    for split, n in (("train", 20), ("val", 7)):
        for c in ("cat", "dog", "fox"):
            folder = root / "folder" / split / c
            folder.mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (18, 22, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
    (root / "folder" / "train" / "dog" / "broken.png").write_bytes(b"not a png")
    (root / "folder" / "val" / "fox" / "notes.txt").write_text("a stray file")
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "make_shards.py"),
            str(root / "folder"),
            str(root / "shards"),
            "--chunk-mb",
            "0.02",
            "--workers",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return root, json.loads(result.stdout[result.stdout.index("{") :])


def test_shards_round_trip_every_image_pixel_equal_with_its_label(shards):
    from litdata import StreamingDataset

    root, summary = shards
    assert summary["train"]["images"] == 60 and summary["train"]["skipped"] == 1
    assert summary["val"]["images"] == 21 and summary["val"]["skipped"] == 1
    assert summary["train"]["chunks"] > 1  # really sharded
    assert "broken.png" in (root / "shards" / "train.skipped.txt").read_text()
    classes = json.loads((root / "shards" / "classes.json").read_text())
    for split in ("train", "val"):
        expected = sorted(
            (classes.index(p.parent.name), np.asarray(Image.open(p)).tobytes())
            for p in (root / "folder" / split).rglob("*.png")
            if p.name != "broken.png"
        )
        data = StreamingDataset(str(root / "shards" / split))
        got = sorted(
            (d["label"], np.asarray(Image.open(io.BytesIO(d["image"]))).tobytes())
            for d in (data[i] for i in range(len(data)))
        )
        assert got == expected, split


def test_train_py_trains_from_local_shards(shards, tmp_path, monkeypatch):
    root, _ = shards
    argv = [
        "train.py",
        *FAST,
        "data=stream",
        f"data.root={root / 'shards'}",
        "data.num_classes=3",
        "data.num_workers=0",
        "data.batch_size=8",
        f"paths.log_dir={tmp_path}",
        "run_name=s",
    ]
    assert run_in_process(trainlab.train.main, argv, monkeypatch) == 0
    metrics = json.loads((tmp_path / "train" / "runs" / "s" / "metrics.json").read_text())
    assert metrics["metrics"]["train/loss"] > 0 and "test/probe_acc" in metrics["metrics"]


def test_missing_shards_stop_with_one_line(tmp_path, monkeypatch, capfd):
    argv = [
        "train.py",
        *FAST,
        "data=stream",
        f"data.root={tmp_path}/none",
        "data.num_classes=3",
        f"paths.log_dir={tmp_path}",
    ]
    assert run_in_process(trainlab.train.main, argv, monkeypatch) == 2
    assert "make_shards.py" in capfd.readouterr().err
