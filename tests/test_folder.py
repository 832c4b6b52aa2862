"""data=folder: any folder of images, no labels (data/folder.py); features.data: the labelled
set the end-of-run table and ``eval.py mode=features`` rate on (evaluation/rating_data.py)."""

import json
import logging
import os
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    CONFIGS,
    FAST,
    assert_one_clear_line,
    make_image_folder,
    run_cli,
    run_in_process,
    run_train,
)
from omegaconf import OmegaConf
from PIL import Image

import trainlab.commands
from trainlab.data.folder import UNLABELLED, FolderDataModule
from trainlab.data.image_files import measured, pin_measured
from trainlab.utils.errors import ConfigError
from trainlab.utils.size_rules import patch, scaled

README = CONFIGS.parent / "README.md"
#: One experiment per family for a folder of one's own: configs/experiment/*_folder.yaml.
FOLDER_EXPERIMENTS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*_folder.yaml"))
#: The folder experiments at test scale: the same keys for every family.
SMALL = [
    "data.num_workers=0", "data.batch_size=8", "model.warmup_epochs=0", "trainer.max_epochs=1",
]  # fmt: skip
#: Their ViT-Small at test scale.
TINY_VIT = ["model.encoder.size=vit_tiny", "model.encoder.depth=2"]
#: Another encoder in its place, at the size of its stride.
RESNET = ["model/encoder=resnet", "data.image_size=32"]


def photos(root: Path, n: int = 24, size: int = 20) -> Path:
    """``n`` RGB images (PNG and JPEG) in sub-folders by "date", at two depths, among stray
    files: a README, a Mac's hidden ``._`` twin of a JPEG, a FIFO."""
    rng = np.random.default_rng(0)
    for i in range(n):
        folder = root / ("2024/06/01" if i % 2 else "2025")
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"photo {i}.{'png' if i % 3 else 'jpg'}")
    (root / "README.txt").write_text("my photos")
    (root / "2025" / "._photo 0.jpg").write_bytes(b"\x00\x05\x16\x07")
    os.mkfifo(root / "2025" / "pipe.png")
    return root


def folder(root: Path, **kwargs) -> FolderDataModule:
    options = dict(image_size=16, in_chans=3, mean=[0.5] * 3, std=[0.5] * 3, val_fraction=0.25)
    return FolderDataModule(root=str(root), **{**options, **kwargs})


def test_every_image_at_any_depth_is_read_unlabelled_and_the_rest_counted(tmp_path, caplog):
    root = photos(tmp_path / "photos")
    data = folder(root)
    data.setup()
    train, val = data.train_set.dataset, data.val_set.dataset
    assert (len(train), len(val)) == (18, 6) and data.test_set.dataset is val
    assert "skipped 3 files that are not images" in caplog.text  # README, ._ twin, FIFO
    paths = [train.dataset.paths[i] for i in train.indices]
    assert {p.parent.name for p in paths} == {"01", "2025"}
    assert all(data.train_set[i][1] == UNLABELLED for i in range(len(train)))
    again = folder(root)
    again.setup()
    assert again.val_set.dataset.indices == val.indices  # the split is seeded: every rank's
    gray = folder(root, in_chans=1, mean=[0.5], std=[0.5])
    gray.setup()
    assert gray.val_set[0][0].shape == (1, 16, 16)


def test_the_normalisation_is_measured_from_the_folder_when_not_given(tmp_path):
    """data.mean and data.std ``auto``: each channel's over the pixels of the images, as
    numpy computes them over every image of a small folder."""
    root = photos(tmp_path / "photos", n=12)
    data = folder(root, mean="auto", std="auto")
    files = sorted(p for p in root.rglob("photo *"))
    pixels = np.concatenate([np.asarray(Image.open(p)).reshape(-1, 3) / 255 for p in files])
    assert np.allclose(data.mean, pixels.mean(0), atol=1e-3)
    assert np.allclose(data.std, pixels.std(0), atol=1e-3)
    gray = folder(root, in_chans=1, mean="auto", std=[0.25])
    assert len(gray.mean) == 1 and gray.std == (0.25,)


def test_the_folder_says_its_channels_and_size(tmp_path, caplog):
    """Read from 64 images' headers: 1 channel when all are gray, else 3; the median shorter
    side, rounded down to a multiple of 8, at most 224. A run says, in one line, the values
    it read and no other."""
    rgb = photos(tmp_path / "photos", n=12, size=20)
    gray = tmp_path / "gray"
    gray.mkdir()
    for i, side in enumerate((30, 41, 50)):  # median shorter side 41: 40 px
        Image.fromarray(np.zeros((side, side + 9), np.uint8)).save(gray / f"{i}.png")
    large = tmp_path / "large"
    large.mkdir()
    for i in range(2):
        Image.fromarray(np.zeros((300, 400, 3), np.uint8)).save(large / f"{i}.jpg")
    assert measured(str(rgb)) == (3, 16)
    assert measured(str(gray)) == (1, 40)
    assert measured(str(large)) == (3, 224)
    given = {"root": str(gray), "in_chans": "${folder_channels:${.root}}", "image_size": 28}
    cfg = OmegaConf.create({"data": given})
    with caplog.at_level(logging.INFO):
        pin_measured(cfg)
    assert OmegaConf.to_container(cfg.data) == {**given, "in_chans": 1}  # a number now
    said = [r.getMessage() for r in caplog.records if "read from" in r.getMessage()]
    assert said == [
        f"[rank 0] {gray}: data.in_chans=1, read from 3 of its images (give them to choose)"
    ]


def test_the_size_rules_of_the_folder_experiments():
    """utils/size_rules.py's table: a grid of about 12 x 12 patches, a view's side rounded to
    a multiple of the patch."""
    assert [patch(s) for s in (16, 32, 64, 96, 128, 224)] == [2, 2, 4, 8, 8, 16]
    assert [scaled(s, 0.43, patch(s)) for s in (16, 96, 224)] == [6, 40, 96]
    assert scaled(16, 0.1, 4) == 4  # at least one patch
    with pytest.raises(ConfigError, match="data.image_size=97 has no ViT patch"):
        patch(97)


@pytest.mark.parametrize(
    "experiment, encoder",
    [
        *(
            (e, TINY_VIT) if e in ("ijepa_folder", "vicreg_folder")
            else pytest.param(e, TINY_VIT, marks=pytest.mark.slow)
            for e in FOLDER_EXPERIMENTS
        ),
        pytest.param("vicreg_folder", RESNET, id="vicreg_folder-resnet", marks=pytest.mark.slow),
    ],
)  # fmt: skip
def test_each_familys_folder_experiment_trains_on_photos_and_rates_on_a_labelled_folder(
    tmp_path, monkeypatch, capfd, experiment, encoder
):
    """The README's command for one's own photos (its folders these, each family's
    experiment, at test scale): the channels and size read from the photos (16 px: a 2 px
    patch, DINO's local views 6 px), held as numbers in the run's config.yaml; rated on the
    labelled folder; the summary says how to export the encoder. A ResNet in the ViT's place
    takes the same recipe."""
    root = photos(tmp_path / "photos", n=40)
    labelled = make_image_folder(tmp_path / "labelled", per_class=6)
    # the README's command, its folders these, at test scale
    shown = next(line for line in README.read_text().splitlines() if "=/photos_labelled" in line)
    readme = shown.split("#")[0].split()[2:]
    paths = {"/photos_labelled": str(labelled), "/photos": str(root)}
    readme = [re.sub("/photos(_labelled)?$", lambda m: paths[m.group(0)], a) for a in readme]
    readme = [re.sub("^experiment=.*", f"experiment={experiment}", a) for a in readme]
    argv = [
        "train.py", *FAST, f"paths.log_dir={tmp_path / 'logs'}", *readme, *SMALL, *encoder,
        "run_name=mine", "features.enabled=true",
    ]  # fmt: skip
    assert f"data.root={root}" in argv and f"features.data={labelled}" in argv
    code = run_in_process(trainlab.commands.train_command, argv, monkeypatch)
    out, err = capfd.readouterr()
    assert code == 0, err[-3000:]
    run_dir = tmp_path / "logs" / "train" / "runs" / "mine"
    saved = (run_dir / "config.yaml").read_text()
    assert f"image_size: {32 if encoder == RESNET else 16}\n" in saved and "in_chans: 3\n" in saved
    if encoder == TINY_VIT:
        assert "patch_size: ${patch:${data.image_size}}" in saved  # follows the size it holds
    metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    assert 0.0 <= metrics["features/linear_acc"] <= 1.0 and "val/rankme" in metrics
    assert f"export: python scripts/export_encoder.py {run_dir}/checkpoints/last.ckpt" in out


@pytest.mark.parametrize(
    "case, needles",
    [
        ("empty", ["holds 0 image(s)", "at least 2"]),
        ("one image", ["holds 1 image(s)", "at least 2"]),
        ("a file", ["is a file", "the folder that holds the images"]),
        ("num_classes", ["data.num_classes=3", "FolderDataModule takes null"]),
        ("train_fraction", ["data.train_fraction=0.5", "no classes"]),
        ("channels", ["features.data=digits has 1 channel(s)", "reads 3"]),
        ("no such set", ["features.data=no_such_set", "configs/data/"]),
    ],
)
def test_what_cannot_train_or_be_rated_is_one_line_and_writes_nothing(
    tmp_path, monkeypatch, capfd, case, needles
):
    root, more = tmp_path / "photos", []
    if case == "empty":
        root.mkdir()
    elif case == "one image":
        photos(root, n=1)
    elif case == "a file":
        root.write_text("not a folder")
    else:
        photos(root)
        more = {
            "num_classes": ["data.num_classes=3"],
            "train_fraction": ["data.train_fraction=0.5"],
            "channels": ["features.enabled=true", "features.data=digits"],
            "no such set": ["features.enabled=true", "features.data=no_such_set"],
        }[case]
    code, err = run_train(
        tmp_path, monkeypatch, capfd, "experiment=vicreg_digits", "data=folder",
        f"data.root={root}", "data.num_workers=0", *more,
    )  # fmt: skip
    assert code == 2, err[-2000:]
    assert_one_clear_line(err, *needles)
    assert not (tmp_path / "logs").exists()


def test_a_run_on_unlabelled_photos_is_judged_by_rankme_and_rated_on_a_labelled_folder(
    tmp_path, monkeypatch, capfd
):
    """VICReg on the photos: every epoch's RankMe picks the best checkpoint, and the
    end-of-run table rates the features, pixels and a random encoder on another folder,
    labelled; eval.py rates the checkpoint on it again, and without it says in one line
    that the photos have no labels."""
    root = photos(tmp_path / "photos", n=40)
    labelled = make_image_folder(tmp_path / "labelled", per_class=6)
    code, err = run_train(
        tmp_path, monkeypatch, capfd, "experiment=vicreg_digits", "data=folder",
        f"data.root={root}", "data.num_workers=0", "data.batch_size=8", "run_name=photos",
        "features.enabled=true", f"features.data={labelled}",
    )  # fmt: skip
    assert code == 0, err[-3000:]
    run_dir = tmp_path / "logs" / "train" / "runs" / "photos"
    results = json.loads((run_dir / "metrics.json").read_text())
    assert results["optimized_metric"]["name"] == "val/rankme"
    metrics = results["metrics"]
    assert "val/rankme" in metrics and "val/probe_acc" not in metrics
    for key in ("features/linear_acc", "baseline/pixels_linear_acc", "baseline/random_knn_acc"):
        assert 0.0 <= metrics[key] <= 1.0, key
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    args = [f"ckpt_path={ckpt}", "mode=features", f"paths.log_dir={tmp_path / 'eval'}"]
    refused = run_cli("eval.py", *args)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert_one_clear_line(refused.stderr, "data=folder has no labels", "features.data=")
    assert not (tmp_path / "eval").exists()
    rated = run_cli("eval.py", *args, f"features.data={labelled}")
    assert rated.returncode == 0, rated.stderr[-2000:]
    assert "frozen features of last.ckpt (imagefolder;" in rated.stdout


@pytest.mark.slow
@pytest.mark.parametrize("experiment", FOLDER_EXPERIMENTS)
def test_two_ranks_rate_on_the_labelled_folder_as_one_process(tmp_path, experiment):
    """2 CPU ranks (Lightning's launcher: the child rank runs without Hydra) train a family's
    folder experiment on the photos and rate on the labelled folder: the table one process
    writes, row for row."""
    root = photos(tmp_path / "photos", n=40)
    labelled = make_image_folder(tmp_path / "labelled", per_class=6)
    scores = []
    for devices in (1, 2):
        done = run_cli(
            "train.py", f"experiment={experiment}", f"data.root={root}", *SMALL, *TINY_VIT,
            "trainer.accelerator=cpu", f"trainer.devices={devices}", f"run_name=r{devices}",
            f"paths.log_dir={tmp_path / 'logs'}", f"features.data={labelled}",
            "extras.print_config=false",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        run_dir = tmp_path / "logs" / "train" / "runs" / f"r{devices}"
        metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
        scores.append(
            {k: v for k, v in metrics.items() if k.startswith(("features/", "baseline/"))}
        )
    assert scores[0] and scores[0].keys() == scores[1].keys()
