"""The Debian fetch part: data=fashion_mnist names Debian's package as its data.fetch, which
fills a missing copy before torchvision's hosts are tried."""

import gzip
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import CONFIGS, write_idx
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate

from trainlab.data.torchvision_sets import TorchvisionDataModule
from trainlab.utils.errors import DataError


def fake_debian(tmp_path, monkeypatch, files: dict | None) -> Path:
    """apt-get and dpkg-deb on PATH that give a package of ``files`` (name: array), gzipped
    where Debian's package keeps them; None: apt-get fails, as with no mirror. Returns the
    log of the commands run."""
    staged = tmp_path / "package"
    inside = staged / "usr" / "share" / "datasets" / "fashion-mnist"
    inside.mkdir(parents=True)
    for name, array in (files or {}).items():
        write_idx(inside / name, array)
        (inside / f"{name}.gz").write_bytes(gzip.compress((inside / name).read_bytes()))
        (inside / name).unlink()
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    apt = "exit 1" if files is None else "touch dataset-fashion-mnist_1_all.deb"
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "apt-get $*" >> {calls}\n{apt}\n')
    (bin_dir / "dpkg-deb").write_text(
        f'#!/bin/sh\necho "dpkg-deb $*" >> {calls}\ncp -r {staged}/. "$3"\n'
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return calls


def fashion(tmp_path, download: bool) -> TorchvisionDataModule:
    """data=fashion_mnist as configs/data composes it, its fetch included."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONFIGS / "data"), version_base="1.3"):
        cfg = compose("fashion_mnist", [f"root={tmp_path / 'data'}", f"download={download}"])
    return instantiate(cfg)


def test_fashion_mnist_is_fetched_from_debians_package_where_it_is_missing(tmp_path, monkeypatch):
    """No copy under data.root and data.download=true: the package's four files, un-gzipped,
    where torchvision reads them; a second run fetches nothing."""
    rng = np.random.default_rng(0)
    files = {f"{p}-{kind}": rng.integers(0, 255 if "images" in kind else 10, shape)
             for p, n in (("train", 40), ("t10k", 10))
             for kind, shape in (("images-idx3-ubyte", (n, 28, 28)), ("labels-idx1-ubyte", (n,)))}  # fmt: skip
    calls = fake_debian(tmp_path, monkeypatch, files)
    dm = fashion(tmp_path, download=True)
    dm.prepare_data()
    assert calls.read_text().splitlines()[0] == "apt-get download dataset-fashion-mnist"
    dm.setup()
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (36, 4, 10)
    raw = tmp_path / "data" / "FashionMNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(files)  # no .deb or temp left
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["FashionMNIST"]
    fashion(tmp_path, download=True).prepare_data()
    assert len(calls.read_text().splitlines()) == 2  # the first fetch's two commands only


def test_fashion_mnist_missing_everywhere_names_both_ways(tmp_path, monkeypatch):
    """Without download the run says both ways in one line; with it, a failed apt-get falls
    to torchvision's hosts (refused here: no network is reached in tests)."""
    calls = fake_debian(tmp_path, monkeypatch, None)
    with pytest.raises(
        DataError,
        match=r"data.download=true to fetch it from Debian's dataset-fashion-mnist package or its hosts, or copy",
    ):
        fashion(tmp_path, download=False).check()
    assert not calls.exists()  # download off: apt-get never called
    monkeypatch.setattr(TorchvisionDataModule, "_open", lambda self, train, download=False: (_ for _ in ()).throw(DataError("hosts unreachable")))  # fmt: skip
    with pytest.raises(DataError, match="hosts unreachable"):
        fashion(tmp_path, download=True).prepare_data()
    assert calls.read_text().splitlines() == ["apt-get download dataset-fashion-mnist"]
    assert not (tmp_path / "data" / "FashionMNIST" / "raw").exists()
