"""MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 through torchvision.

With ``download=true`` torchvision fetches missing files into ``root``; offline with the
files present nothing is fetched; offline without them the run stops at once with the
path it expected.
"""

from pathlib import Path

from torchvision import datasets

from trainlab.data.base import ImageDataModule
from trainlab.utils.errors import DataError

_DATASETS = {  # (class, its folder under root, its classes)
    "mnist": (datasets.MNIST, "MNIST/raw", 10),
    "fashion_mnist": (datasets.FashionMNIST, "FashionMNIST/raw", 10),
    "cifar10": (datasets.CIFAR10, "cifar-10-batches-py", 10),
    "cifar100": (datasets.CIFAR100, "cifar-100-python", 100),
}


class TorchvisionDataModule(ImageDataModule):
    def __init__(self, dataset: str, download: bool = False, **kwargs):
        if dataset not in _DATASETS:
            raise DataError(f"unknown torchvision data set {dataset!r}: one of {list(_DATASETS)}")
        super().__init__(**kwargs)
        self.name, self.download = dataset, download
        self.cls, subdir, self.classes = _DATASETS[dataset]
        self.expected = f"{self.root}/{subdir}"

    def check(self) -> None:
        super().check()
        if not self.download and not Path(self.expected).is_dir():
            raise DataError(
                f"{self.name} not found at {self.expected}: set data.download=true on a machine "
                f"with network, or copy the files there (data.root={self.root})"
            )

    def _open(self, train: bool, download: bool = False):
        try:
            return self.cls(self.root, train=train, download=download)
        except RuntimeError as e:  # torchvision: "Dataset not found or corrupted."
            hint = (
                "set data.download=true on a machine with network, or copy the files there"
                if not download
                else f"the download failed ({e}); copy the files there by hand"
            )  # also reached when the folder exists but holds incomplete or corrupt files
            raise DataError(f"{self.name} not found at {self.expected}: {hint}") from None

    def prepare_data(self) -> None:
        # Runs on one process per node before setup: the only place that downloads.
        for train in (True, False):
            try:
                self._open(train, download=self.download)
            except DataError:
                raise
            except OSError as e:  # no network: URLError and friends
                raise DataError(
                    f"{self.name} not found at {self.expected} and could not be downloaded "
                    f"({e}); copy the files there by hand"
                ) from None

    def build_splits(self):
        # No validation split in these sets: a seeded val_fraction of train is held out.
        return self._open(train=True), None, self._open(train=False)
