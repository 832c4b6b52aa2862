"""Streaming shards (litdata): made from an image folder they round-trip exactly, skip and
list bad files; train.py trains from them with data=stream, from disk and from S3; a stop
mid-epoch resumes exactly; 2 ranks split every epoch and resume elastically."""

import csv
import io
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import FAST, ROOT, assert_one_clear_line, run_cli, run_in_process, run_train
from PIL import Image
from test_views import check_views_normalise_like_the_single_image

import trainlab.commands
import trainlab.data


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


def stream_run(root, batch_size: int, workers: int = 0) -> list[str]:
    """train.py overrides for the fixture's shards (a directory or an s3:// URI)."""
    return [
        "extras.print_config=false",
        "data=stream",
        f"data.root={root}",
        "data.num_classes=3",
        "data.image_size=16",  # the default ViT-Tiny/4 at the stream's own 224 px is minutes a step
        f"data.num_workers={workers}",
        f"data.batch_size={batch_size}",
    ]


@pytest.mark.slow  # writing the shards takes 13 s: make test-slow, which CI runs
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


@pytest.mark.slow  # 5 s: make test-slow, which CI runs
def test_make_shards_refuses_to_overwrite_shards(shards):
    root, _ = shards
    index = root / "shards" / "train" / "index.json"
    before = index.read_bytes()
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "make_shards.py"),
            str(root / "folder"),
            str(root / "shards"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "--overwrite" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and index.read_bytes() == before


@pytest.mark.slow  # it needs the shards (13 s): make test-slow, which CI runs
def test_train_py_trains_from_local_shards(shards, tmp_path, monkeypatch):
    root, _ = shards
    argv = [
        "train.py",
        *FAST,
        *stream_run(root / "shards", batch_size=8),
        f"paths.log_dir={tmp_path}",
        "run_name=s",
    ]
    assert run_in_process(trainlab.commands.train_command, argv, monkeypatch) == 0
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
    assert run_in_process(trainlab.commands.train_command, argv, monkeypatch) == 2
    assert "make_shards.py" in capfd.readouterr().err


@pytest.mark.slow  # 14 s: make test-slow, which CI runs
def test_train_py_streams_from_an_s3_server_and_reuses_its_cache(shards, tmp_path):
    """moto's S3 on loopback (TLS, trainlab/data/loopback_s3.py), shards uploaded with the S3
    API, 2 epochs from s3://: every chunk is downloaded once into data.cache_dir and read
    from there in epoch 2."""
    import os

    from trainlab.data.loopback_s3 import loopback_s3
    from trainlab.data.stream import StreamDataModule
    from trainlab.utils.errors import DataError

    root, _ = shards
    with loopback_s3(tmp_path) as s3:
        s3.upload(root / "shards", "s3://data/shards")
        with pytest.MonkeyPatch.context() as env:  # the up-front check, against the server
            for key, value in s3.env.items():
                env.setenv(key, value)
            StreamDataModule(root="s3://data/shards", num_classes=3).check()
            with pytest.raises(DataError, match="no shards at s3://data/elsewhere/train"):
                StreamDataModule(root="s3://data/elsewhere", num_classes=3).check()
        result = subprocess.run(
            [
                sys.executable,
                str(ROOT / "train.py"),
                *stream_run("s3://data/shards", batch_size=8),
                f"data.cache_dir={tmp_path / 'cache'}",
                "trainer.max_epochs=2",
                f"paths.log_dir={tmp_path}",
                "run_name=s3",
            ],
            env={**os.environ, **s3.env},
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    # no split to choose on apart from test: the end-of-run rating says so, the run succeeds
    assert "frozen features not rated: data=stream holds no val split" in result.stdout
    chunk_gets = {p: n for p, n in s3.gets.items() if p.endswith(".bin")}
    cached = sorted((tmp_path / "cache").rglob("chunk-*.bin"))
    train_chunks = json.loads((root / "shards" / "train" / "index.json").read_text())["chunks"]
    assert len([p for p in cached if p.parent.name == "train"]) == len(train_chunks)
    assert chunk_gets and set(chunk_gets.values()) == {1}, chunk_gets  # epoch 2: the cache


@pytest.mark.slow  # 16 s: make test-slow, which CI runs
def test_a_stop_mid_epoch_resumes_the_shard_stream_exactly(shards, tmp_path, monkeypatch, capfd):
    """SIGTERM after step 5 of epoch 0 (8 per epoch, 2 loader workers), then resume=true:
    every step's train/loss equals the uninterrupted run's, in the rest of epoch 0 and in
    epoch 1, so the stream continued with the next unseen samples (litdata's loader state
    is in the checkpoint) and started the next epoch afresh."""
    from test_resilience import losses_by_step, stop_at

    root, _ = shards
    run = [
        "trainer.max_epochs=2",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "trainer.log_every_n_steps=1",
        *stream_run(root / "shards", batch_size=7, workers=2),
        f"paths.log_dir={tmp_path}",
    ]
    main = trainlab.commands.train_command
    assert run_in_process(main, ["train.py", *run, "run_name=straight"], monkeypatch) == 0
    cut = ["train.py", *run, "run_name=cut", "resume=true"]
    assert run_in_process(main, [*cut, *stop_at(5)], monkeypatch) == 143
    assert run_in_process(main, cut, monkeypatch) == 0
    straight = losses_by_step(tmp_path / "train" / "runs" / "straight")
    assert len(straight) == 16  # 60 samples / 7 = 8 full batches per epoch
    assert losses_by_step(tmp_path / "train" / "runs" / "cut") == straight


@pytest.mark.slow  # 12 s: make test-slow, which CI runs
def test_two_ranks_split_every_epoch_and_resume_on_another_number_of_ranks(
    shards, tmp_path, monkeypatch
):
    """litdata's guarantees, checked with 2 gloo ranks (batches of 4, 60 training and 21
    validation images): every epoch is split without overlap (training drops fewer than a
    global batch to keep the ranks equal; evaluation drops and repeats nothing), in a new
    order every epoch. An epoch cut on 1 rank and resumed on 2, or cut on 2 and resumed on
    1, continues the original order exactly when the cut is a multiple of the new global
    batch; otherwise the cut is rounded down and at most a global batch is read twice."""
    import torch
    from stream_ranks import sample_ids, stream_module

    root, _ = shards
    shards_dir = root / "shards"
    monkeypatch.setenv("PL_GLOBAL_SEED", "7")  # stream_module seeds; restored after the test
    train = stream_module(shards_dir).train_dataloader()
    one = {"epoch0": sample_ids(train), "epoch1": sample_ids(train)}
    for name, batches in (("state1", 4), ("state1_odd", 3)):  # 16 and 12 samples
        cut = stream_module(shards_dir).train_dataloader()  # a new data set, as in a new run
        one[f"before_{name}"] = sample_ids(cut, limit=batches)
        torch.save(cut.state_dict(), tmp_path / f"{name}.pt")

    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "stream_ranks.py"), str(shards_dir), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    resumed = stream_module(shards_dir).train_dataloader()
    resumed.load_state_dict(torch.load(tmp_path / "state2.pt", weights_only=True))
    one["after_state2"], one["next_epoch"] = sample_ids(resumed), sample_ids(resumed)

    everything = set(one["epoch0"])
    assert len(everything) == len(one["epoch0"]) == 60  # ids identify the 60 images
    for epoch in ("epoch0", "epoch1"):
        assert len(r0[epoch]) == len(r1[epoch])
        assert not set(r0[epoch]) & set(r1[epoch])
        union = set(r0[epoch]) | set(r1[epoch])
        assert union <= everything and len(everything) - len(union) < 2 * 4
    assert r0["epoch0"] != r0["epoch1"] and one["epoch0"] != one["epoch1"]
    assert not set(r0["val"]) & set(r1["val"])
    assert len(r0["val"]) + len(r1["val"]) == 21 == len(set(r0["val"]) | set(r1["val"]))

    def merged(ids0, ids1):
        """The global order of 2 ranks' batches (they alternate, as in a step)."""
        return [i for b in range(0, len(ids0), 4) for ids in (ids0, ids1) for i in ids[b : b + 4]]

    # 1 rank -> 2 ranks after 16 samples: the 1-rank order goes on, split between the
    # ranks, up to the last full global batch (drop_last).
    assert merged(r0["after_state1"], r1["after_state1"]) == one["epoch0"][16:56]
    # After 12 samples (not a multiple of 8): resumed from 8, so 4 samples come twice.
    assert merged(r0["after_state1_odd"], r1["after_state1_odd"]) == one["epoch0"][8:56]
    # 2 ranks -> 1 rank after 3 batches each: the 2-rank order goes on; the next epoch is
    # the 1-rank run's.
    two = merged(r0["epoch0"], r1["epoch0"])
    assert merged(r0["before_state2"], r1["before_state2"]) == two[:24]
    assert one["after_state2"] == two[24:]
    assert one["next_epoch"] == one["epoch1"]


@pytest.mark.slow  # a 2-process run: make test-slow (CI runs it after make test)
def test_a_2_rank_run_stopped_mid_epoch_resumes_on_1_device(shards, tmp_path):
    """train.py, data=stream, 2 gloo ranks, 4 steps of 2 x 7 per epoch, validation after
    every 2 steps (validation reads whole chunks per rank, so the ranks get unequal
    batches). SIGTERM to rank 0 after step 5: the ranks agree on it at the next batch and
    stop together where validation would start after step 6, two steps into epoch 1 (28
    of 56 samples read). Resumed with trainer.devices=1 from Lightning's checkpoint (rank
    0's loader state), the run first validates (the checkpoint it saves then must keep the
    loader's position), then epoch 1 continues with the 28 samples not read: 4 steps of 7,
    so the run ends after 10 steps, every step logged once."""
    from test_resilience import stop_at

    root, _ = shards
    run = [
        "trainer.max_epochs=2",
        "+trainer.val_check_interval=2",
        "trainer.limit_test_batches=1",
        "trainer.log_every_n_steps=1",
        *stream_run(root / "shards", batch_size=7),
        f"paths.log_dir={tmp_path}",
        "run_name=elastic",
        "resume=true",
    ]
    two = ["trainer.accelerator=cpu", "trainer.devices=2", "strategy=ddp", *stop_at(5)]
    env = {"PYTHONPATH": str(ROOT / "tests")}
    first = run_cli("train.py", *run, *two, cwd=tmp_path, env=env, timeout=400)
    assert first.returncode == 128 + 15, first.stderr[-3000:]
    second = run_cli("train.py", *run, "trainer.devices=1", cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    run_dir = tmp_path / "train" / "runs" / "elastic"
    with (run_dir / "csv" / "metrics.csv").open() as f:  # every row, not a dict by step
        rows = list(csv.DictReader(f))
    logged = [int(row["step"]) for row in rows if row.get("train/loss_step")]
    assert logged == list(range(10))  # each step once, none repeated after the resume
    validated = [int(row["step"]) for row in rows if row.get("val/rankme")]
    assert validated == [1, 3, 5, 7, 9]  # the validation the stop came before runs on resume
    starts = json.loads((run_dir / "meta.json").read_text())["starts"]
    assert [start["world_size"] for start in starts] == [2, 1]


NO_AWS_FILES = {
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    "AWS_CONFIG_FILE": "/nonexistent",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.mark.parametrize(
    "env, needles",
    [
        ({}, ["no S3 credentials", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]),
        (  # port 9 (discard) on loopback: nothing listens, the connection is refused
            {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"},
            ["S3 endpoint http://127.0.0.1:9 does not answer", "AWS_ENDPOINT_URL"],
        ),
    ],
)
def test_s3_without_credentials_or_endpoint_is_one_line(tmp_path, monkeypatch, capfd, env, needles):
    """Checked before the model is built, with a 3 s connect timeout: not botocore's
    NoCredentialsError later, nor a hang in litdata's download threads."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in {**NO_AWS_FILES, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", **env}.items():
        monkeypatch.setenv(key, value)
    stream = ("data=stream", "data.root=s3://bucket/shards", "data.num_classes=3", "run_name=s3")
    code, err = run_train(tmp_path, monkeypatch, capfd, *stream)
    assert code == 2
    assert_one_clear_line(err, *needles)
    assert not (tmp_path / "logs" / "train" / "runs" / "s3").exists()


def test_data_stream_without_litdata_names_its_pip_command(tmp_path, monkeypatch, capfd):
    """data=stream without litdata: one line with the pip command, exit 2, nothing written."""
    monkeypatch.setitem(sys.modules, "litdata", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "trainlab.data.stream", raising=False)
    monkeypatch.delattr(trainlab.data, "stream", raising=False)  # the package's attribute too
    code, err = run_train(tmp_path, monkeypatch, capfd, "data=stream", "data.num_classes=3")
    assert code == 2
    assert_one_clear_line(err, "data=stream needs the package litdata", 'pip install "litdata')
    assert not (tmp_path / "logs" / "train" / "runs").exists() or not any(
        (tmp_path / "logs" / "train" / "runs").iterdir()
    )


@pytest.mark.slow  # it needs the shards (13 s): make test-slow, which CI runs
def test_views_from_shards_normalise_like_the_single_image(shards):
    from trainlab.data.stream import StreamDataModule

    root, _ = shards
    rgb = dict(batch_size=4, crop_scale=[0.3, 1.0], mean=(0.5,) * 3, std=(0.25,) * 3)
    dm = StreamDataModule(
        root=str(root / "shards"), image_size=16, in_chans=3, num_classes=3, **rgb
    )
    check_views_normalise_like_the_single_image(dm)
