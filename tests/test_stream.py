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


def tls_files(folder):
    """A CA and a server certificate for 127.0.0.1 signed by it (obstore, litdata's S3
    reader, refuses plain http and certificates that are their own CA)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(subject, issuer, key, signer, ca):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False).add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(
        certificate("test CA", "test CA", ca_key, ca_key, True).public_bytes(pem)
    )
    (folder / "cert.pem").write_bytes(
        certificate("127.0.0.1", "test CA", key, ca_key, False).public_bytes(pem)
    )
    (folder / "key.pem").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder / "ca.pem", folder / "cert.pem", folder / "key.pem"


def test_train_py_streams_from_an_s3_server_and_reuses_its_cache(shards, tmp_path):
    """moto's S3 on loopback (TLS), shards uploaded with the S3 API, 2 epochs from s3://:
    every chunk is downloaded once into data.cache_dir and read from there in epoch 2."""
    import collections
    import os
    import threading

    import boto3
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    root, _ = shards
    ca, cert, key = tls_files(tmp_path)
    gets = collections.Counter()
    app = DomainDispatcherApplication(create_backend_app)

    def counting(environ, start_response):
        if environ["REQUEST_METHOD"] == "GET":
            gets[environ["PATH_INFO"]] += 1
        return app(environ, start_response)

    server = make_server("127.0.0.1", 0, counting, threaded=True, ssl_context=(str(cert), str(key)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {
        "AWS_ENDPOINT_URL": f"https://127.0.0.1:{server.server_port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CA_BUNDLE": str(ca),  # boto3
        "SSL_CERT_FILE": str(ca),  # obstore
    }
    try:
        s3 = boto3.client(
            "s3",
            **{"endpoint_url": env["AWS_ENDPOINT_URL"], "verify": str(ca)},
            aws_access_key_id="test",
            aws_secret_access_key="test",
            region_name="us-east-1",
        )
        s3.create_bucket(Bucket="data")
        for path in (root / "shards").rglob("*"):
            if path.is_file():
                s3.upload_file(str(path), "data", f"shards/{path.relative_to(root / 'shards')}")
        result = subprocess.run(
            [
                sys.executable,
                str(ROOT / "train.py"),
                "data=stream",
                "data.root=s3://data/shards",
                f"data.cache_dir={tmp_path / 'cache'}",
                "data.num_classes=3",
                "data.num_workers=0",
                "data.batch_size=8",
                "trainer.max_epochs=2",
                "extras.print_config=false",
                f"paths.log_dir={tmp_path}",
                "run_name=s3",
            ],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr[-3000:]
    chunk_gets = {p: n for p, n in gets.items() if p.endswith(".bin")}
    cached = sorted((tmp_path / "cache").rglob("chunk-*.bin"))
    train_chunks = json.loads((root / "shards" / "train" / "index.json").read_text())["chunks"]
    assert len([p for p in cached if p.parent.name == "train"]) == len(train_chunks)
    assert chunk_gets and set(chunk_gets.values()) == {1}, (
        chunk_gets
    )  # once each: epoch 2 hits the cache


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
        "extras.print_config=false",
        "data=stream",
        f"data.root={root / 'shards'}",
        "data.num_classes=3",
        "data.num_workers=2",
        "data.batch_size=7",
        f"paths.log_dir={tmp_path}",
    ]
    main = trainlab.train.main
    assert run_in_process(main, ["train.py", *run, "run_name=straight"], monkeypatch) == 0
    cut = ["train.py", *run, "run_name=cut", "resume=true"]
    assert run_in_process(main, [*cut, *stop_at(5)], monkeypatch) == 143
    assert run_in_process(main, cut, monkeypatch) == 0
    straight = losses_by_step(tmp_path / "train" / "runs" / "straight")
    assert len(straight) == 16  # 60 samples / 7 = 8 full batches per epoch
    assert losses_by_step(tmp_path / "train" / "runs" / "cut") == straight


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
