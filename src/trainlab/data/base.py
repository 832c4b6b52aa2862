"""The DataModule every data set shares: splits, loaders and transforms.

A data set subclass only says how to build its raw splits (``build_splits``); batching,
validation split, workers and transforms live here once.
"""

from collections.abc import Sequence

import lightning as L
import torch
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DataLoader, Dataset, random_split
from torchdata.stateful_dataloader import StatefulDataLoader

from trainlab.data.low_shot import class_balanced_subset, kept_labels
from trainlab.data.sampler import SeededSampler
from trainlab.data.transforms import (
    DeviceNormalisation,
    MultiView,
    View,
    build_transform,
    build_view,
)
from trainlab.data.worker_signals import init_worker
from trainlab.utils.errors import DataError
from trainlab.utils.logging import get_logger
from trainlab.utils.machine import usable_cores
from trainlab.utils.ranges import Bounds, Count, NonNegativeInt, OpenFraction, PositiveFraction
from trainlab.utils.seeding import call_seeded, run_seed

log = get_logger(__name__)


class Transformed(Dataset):
    """Applies a transform to the image of an (image, label) data set.

    Train and validation share one underlying data set but need different transforms,
    so the transform is attached per split instead of to the data set itself.
    """

    def __init__(self, dataset: Dataset, transform, random: bool = True):
        # random=False: the transform draws nothing, so the per-sample seeding (a fork of the
        # RNG state, about 0.4 ms a sample on a CPU) is skipped.
        self.dataset, self.transform, self.random = dataset, transform, random

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: int | tuple[int, int]):
        if isinstance(key, int):
            image, label = self.dataset[key]
            return self.transform(image), label
        index, seed = key  # from SeededSampler: the crop depends on this sample's seed only
        image, label = self.dataset[index]
        if not self.random:
            return self.transform(image), label
        return call_seeded(seed, self.transform, image), label


class ImageDataModule(L.LightningDataModule):
    """Base class: subclasses implement ``build_splits`` and may override ``prepare_data``."""

    name = "images"
    classes: int | None = None  # the data set's own class count, where it is fixed

    def __init__(
        self,
        root: str = "data",
        image_size: Count = 32,
        in_chans: Count = 3,
        num_classes: Count | None = 10,
        mean: Sequence[float] = (0.5,),
        std: Sequence[float] = (0.5,),
        batch_size: Count = 64,
        global_batch_size: Count | None = None,
        eval_batch_size: Count | None = None,
        num_workers: NonNegativeInt = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        drop_last: bool = True,
        val_fraction: OpenFraction = 0.1,
        seed: NonNegativeInt = 0,
        split_seed: NonNegativeInt | None = None,
        crop_scale: Bounds | None = None,
        hflip: bool = False,
        train_fraction: PositiveFraction = 1.0,
        uint8_batches: bool = True,
        views: Sequence[View] | None = None,
    ):
        super().__init__()
        self.root, self.image_size, self.in_chans = root, image_size, in_chans
        self.num_classes, self.mean, self.std = num_classes, tuple(mean), tuple(std)
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        # When set, train.py derives batch_size from it and the number of devices.
        self.global_batch_size = global_batch_size
        if num_workers > (cores := usable_cores()):  # torch warns at every loader beyond it
            log.info(f"data.num_workers={num_workers}: {cores}, the cores this process may use")
            num_workers = cores
        self.num_workers = num_workers
        self.pin_memory = pin_memory and torch.cuda.is_available()
        self.persistent_workers = persistent_workers and num_workers > 0
        self.drop_last, self.val_fraction, self.seed = drop_last, val_fraction, seed
        # Fixed apart from seed, the val split stays put while seeds vary the low-shot draws:
        # a classifier trained at 1 % then sees the images a frozen probe of seed 0's run saw.
        self.split_seed = seed if split_seed is None else split_seed
        self.crop_scale, self.hflip = crop_scale, hflip
        self.train_fraction = train_fraction  # < 1: a class-balanced low-shot subset
        # Training batches leave the loader workers as uint8 and are normalised on the
        # device (on_after_batch_transfer), as FFCV and DALI do: a quarter of the bytes
        # through the worker queues, pinned memory and the copy to the GPU.
        self.uint8_batches = uint8_batches
        self.normalise = DeviceNormalisation(self.mean, self.std)
        # Joint-embedding methods: each training image as a list of views (build_view
        # recipes); a training batch is then ([view 1 (B, C, H, W), view 2, ...], labels).
        # Validation and test batches stay single images. None: one image, as I-JEPA reads.
        self.views = [dict(v) for v in views] if views else None
        self.train_set = self.val_set = self.test_set = None

    # -- to implement -------------------------------------------------------------------
    def check(self) -> None:
        """Fail fast, before any model is built, when the data cannot be there (cheap checks).
        A subclass that adds its own calls this one too."""
        if self.classes is not None and (self.num_classes or 0) < self.classes:
            raise DataError(
                f"data.num_classes={self.num_classes} is below the {self.classes} classes of "
                f"{self.name}: its labels would not fit the heads; set data.num_classes="
                f"{self.classes}"
            )

    def build_splits(self) -> tuple[Dataset, Dataset | None, Dataset]:
        """Return (train, val or None, test) of raw (image, label) pairs.

        Return ``None`` for val when the data set has no validation split: a seeded
        ``val_fraction`` of train is held out instead.
        """
        raise NotImplementedError

    # -- shared -------------------------------------------------------------------------
    def augments(self) -> bool:
        """Whether the train transform draws random numbers (override with ``transform``)."""
        return self.crop_scale is not None or self.hflip or bool(self.views)

    def transform(self, train: bool):
        """Per image, in the loader workers: uint8 for training with ``uint8_batches``; with
        ``views``, a list of them."""
        if train and self.views:
            normalise = not self.uint8_batches
            return MultiView(
                [
                    build_view(v, self.image_size, self.mean, self.std, self.in_chans, normalise)
                    for v in self.views
                ]
            )
        return build_transform(
            self.image_size,
            self.mean,
            self.std,
            train,
            self.crop_scale,
            self.hflip,
            normalise=not (train and self.uint8_batches),
        )

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        images = batch[0] if isinstance(batch, (list, tuple)) and batch else None
        if torch.is_tensor(images) and images.dtype == torch.uint8:  # transform(train=True)
            return type(batch)([self.normalise(images), *batch[1:]])
        if isinstance(images, list) and images and images[0].dtype == torch.uint8:  # views
            return type(batch)([[self.normalise(v) for v in images], *batch[1:]])
        return batch

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        train, val, test = self.build_splits()
        if val is None:
            train, val = self._hold_out(train)
        if self.train_fraction < 1:
            train = class_balanced_subset(train, self.train_fraction, self.seed)
        for split, data in (("train", train), ("val", val), ("test", test)):
            if len(data) == 0:
                raise DataError(f"the {split} split of {self.name} is empty: check data.root")
            self._check_labels(split, data)
        self.train_set = Transformed(train, self.transform(train=True), random=self.augments())
        self.val_set = Transformed(val, self.transform(train=False))
        self.test_set = Transformed(test, self.transform(train=False))

    def _check_labels(self, split: str, data: Dataset) -> None:
        """Labels outside 0 to num_classes - 1 (a damaged label file, too few classes), where
        the data set keeps its labels apart from its images: refused before a head meets one."""
        labels = kept_labels(data)
        if labels is None or len(labels) == 0 or self.num_classes is None:
            return
        outside = labels[(labels < 0) | (labels >= self.num_classes)].unique()
        if len(outside):
            shown = ", ".join(str(int(v)) for v in outside[:3]) + (
                ", ..." if len(outside) > 3 else ""
            )
            raise DataError(
                f"the {split} split of {self.name} has labels {shown} outside 0 to "
                f"{self.num_classes - 1} (data.num_classes={self.num_classes}): its label "
                f"files under data.root={self.root} are damaged, or data.num_classes is too small"
            )

    def eval_splits(self) -> dict[str, Dataset]:
        """Train, val and test, all with the evaluation transform (no augmentation): what a
        frozen-feature evaluation reads. The one place that decides where its choices are
        made: where val is also the test split (an image folder's val/, unless
        ``holdout_val``), a choice made on val would be made on test, so the evaluation
        chooses on ``val_fraction`` of train held out (seeded: the same on every rank)."""
        self.setup()
        train, val = self.train_set.dataset, self.val_set.dataset
        if val is self.test_set.dataset:
            train, val = self._hold_out(train)
            log.info(
                f"{self.name}: val is the test split; the evaluation chooses on "
                f"{self.val_fraction:.0%} of train held out"
            )
        plain = self.transform(train=False)
        return {
            "train": Transformed(train, plain),
            "val": Transformed(val, plain),
            "test": self.test_set,
        }

    def _hold_out(self, train: Dataset) -> tuple[Dataset, Dataset]:
        n_val = round(len(train) * self.val_fraction)
        if not 0 < n_val < len(train):
            size = " (data.train_size)" if hasattr(self, "train_size") else ""
            raise DataError(
                f"the train split of {self.name} has {len(train)} samples, too few to hold "
                f"data.val_fraction={self.val_fraction} of them out for validation and keep "
                f"some: give it more samples{size}, or change data.val_fraction"
            )
        # Seeded, so train.py and eval.py and every rank see the same split.
        generator = torch.Generator().manual_seed(self.split_seed)
        val, train = random_split(train, [n_val, len(train) - n_val], generator=generator)
        return train, val

    def _sampler_kwargs(self) -> dict:
        if self.trainer is not None and self.trainer.world_size > 1:
            return self.trainer.strategy.distributed_sampler_kwargs
        return {"num_replicas": 1, "rank": 0}

    def refuse_no_full_batch(self, world_size: int) -> None:
        """Refuse a train split with fewer images per device than one batch: the loader drops
        incomplete batches, and Lightning would run zero steps and test an untrained model
        without a word. Preflight asks before the run dir exists, the train loader again."""
        per_device = len(SeededSampler(self.train_set, num_replicas=world_size, rank=0))
        if self.drop_last and per_device < self.batch_size:
            raise DataError(
                f"the train split has {per_device} images per device, fewer than "
                f"data.batch_size={self.batch_size}: no full batch, so no training step "
                "would run; lower data.batch_size or raise data.train_fraction"
            )

    def _loader(self, dataset: Dataset, train: bool) -> DataLoader:
        common = dict(
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            worker_init_fn=init_worker,  # stop signals are the main process's
        )
        if train:
            # Stateful: Lightning saves the position inside the epoch in every checkpoint,
            # so a mid-epoch resume continues with the next unseen batch.
            sampler = SeededSampler(
                dataset, shuffle=True, seed=run_seed(), **self._sampler_kwargs()
            )
            self.refuse_no_full_batch(sampler.num_replicas)
            # After a resume Lightning creates the iterator (and the stateful loader, with
            # workers, fetches ahead) before it sets the epoch: set it here, to the epoch whose
            # batches come next, as Lightning will (an epoch-end checkpoint's next epoch).
            sampler.set_epoch(
                self.trainer.fit_loop.epoch_progress.current.processed if self.trainer else 0
            )
            return StatefulDataLoader(
                dataset,
                batch_size=self.batch_size,
                sampler=sampler,
                drop_last=self.drop_last,
                **common,
            )
        sampler = None
        if self.trainer is not None and self.trainer.world_size > 1:
            # Lightning's default DistributedSampler pads ranks to equal length with repeated
            # samples, so val/test metrics would count some samples twice. This one doesn't.
            sampler = UnrepeatedDistributedSampler(dataset, shuffle=False, **self._sampler_kwargs())
        return DataLoader(dataset, self.eval_batch_size, sampler=sampler, **common)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, train=False)
