"""MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 through torchvision.

With ``download=true`` missing files are fetched into ``root``: by ``fetch`` where the data
node names one (Fashion-MNIST: Debian's package, configs/data/fetch/), else by torchvision
from the data set's hosts. With the files present nothing is fetched; without them and
without ``download`` the run stops at once with the path it expected and the ways to fill it.
"""

from collections.abc import Callable
from pathlib import Path

from torchvision import datasets

from trainlab.data.base import ImageDataModule
from trainlab.utils.errors import DataError, one_line

_DATASETS = {  # (class, its folder under root, its classes)
    "mnist": (datasets.MNIST, "MNIST/raw", 10),
    "fashion_mnist": (datasets.FashionMNIST, "FashionMNIST/raw", 10),
    "cifar10": (datasets.CIFAR10, "cifar-10-batches-py", 10),
    "cifar100": (datasets.CIFAR100, "cifar-100-python", 100),
}


class TorchvisionDataModule(ImageDataModule):
    def __init__(
        self,
        dataset: str,
        download: bool = False,
        fetch: Callable[[Path], bool] | None = None,
        **kwargs,
    ):
        """``fetch(folder)`` fills the raw folder before torchvision's download is tried and
        says whether it did; its ``str`` names where from, for the message of a missing set."""
        if dataset not in _DATASETS:
            raise DataError(f"unknown torchvision data set {dataset!r}: one of {list(_DATASETS)}")
        super().__init__(**kwargs)
        self.name, self.download, self.fetch = dataset, download, fetch
        self.cls, subdir, self.classes = _DATASETS[dataset]
        self.expected = f"{self.root}/{subdir}"

    def check(self) -> None:
        super().check()
        if not self.download and not Path(self.expected).is_dir():
            raise DataError(f"{self.name} not found at {self.expected}: {self.ways_to_get_it()}")

    def ways_to_get_it(self) -> str:
        first = f"{self.fetch} or " if self.fetch else ""
        return (
            f"set data.download=true to fetch it from {first}its hosts, or copy the files "
            f"there (data.root={self.root})"
        )

    def _open(self, train: bool, download: bool = False):
        # torchvision says "Dataset not found or corrupted." (RuntimeError) for a missing or
        # a short file; a damaged header ends in whatever its parser raised.
        try:
            return self.cls(self.root, train=train, download=download)
        except (RuntimeError, ValueError, AssertionError, EOFError) as e:
            if self.complete():
                why = one_line(e) if str(e).strip() else "a bad header"
                raise DataError(
                    f"{self.name} at {self.expected} holds files that cannot be read, damaged "
                    f"or incomplete ({type(e).__name__}: {why}): "
                    "delete them and set data.download=true, or copy intact files there"
                ) from None
            hint = (
                self.ways_to_get_it()
                if not download
                else f"the download failed ({e}); copy the files there by hand"
            )
            raise DataError(f"{self.name} not found at {self.expected}: {hint}") from None

    def prepare_data(self) -> None:
        # Runs on one process per node before setup: the only place that downloads.
        if self.download and self.fetch and not self.complete():
            self.fetch(Path(self.expected))
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

    def complete(self) -> bool:
        """Whether the raw files of both splits are there (the names torchvision downloads,
        un-gzipped: ``resources``); reading them is setup's."""
        resources = getattr(self.cls, "resources", None)  # the MNIST kinds; CIFAR: unknown
        names = [Path(url).name.removesuffix(".gz") for url, _md5 in resources or []]
        return bool(names) and all((Path(self.expected) / name).is_file() for name in names)

    def build_splits(self):
        # No validation split in these sets: a seeded val_fraction of train is held out.
        return self._open(train=True), None, self._open(train=False)
