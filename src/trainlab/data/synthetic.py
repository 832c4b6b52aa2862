"""data=synthetic: seeded uint8 images already at the model's size, for benchmarks.

torchvision's FakeData draws a PIL image per sample and the pipeline then crops it: 2.7 ms
per 224-px image on one core here (benchmarks/README.md), and 48 ms was seen on an H200's host,
enough to bound a GPU step. Here a small pool of images is drawn once as uint8 tensors and each sample is a view of one of
them, with no PIL, no decode and no crop: the loader costs a copy per sample, so a benchmark
times the step (the loader's own rate: benchmarks/loader.py).
"""

import torch
from torch.utils.data import Dataset
from torchvision.transforms import v2

from trainlab.data.base import ImageDataModule
from trainlab.data.transforms import normalisation
from trainlab.utils.ranges import Count


class SyntheticImages(Dataset):
    """``size`` (image, label) pairs cycling over ``pool`` random uint8 images (C, H, W)."""

    def __init__(self, size: int, shape: tuple, num_classes: int, pool: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (pool, *shape), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, num_classes, (pool,), generator=g)
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        i = index % len(self.images)
        return self.images[i], int(self.labels[i])


class SyntheticDataModule(ImageDataModule):
    name = "synthetic"

    def __init__(self, train_size: Count = 256, test_size: Count = 64, pool: Count = 64, **kwargs):
        super().__init__(**kwargs)
        self.train_size, self.test_size, self.pool = train_size, test_size, pool

    def build_splits(self):
        shape = (self.in_chans, self.image_size, self.image_size)
        make = lambda n, seed: SyntheticImages(n, shape, self.num_classes, self.pool, seed)  # noqa: E731
        return make(self.train_size, self.seed), None, make(self.test_size, self.seed + 1)

    def augments(self) -> bool:
        return bool(self.views)

    def transform(self, train: bool):
        """The images are already at size: training batches stay uint8 (normalised on the
        device, as for every data set), evaluation ones are normalised in the workers."""
        if self.views or (train and not self.uint8_batches):
            return super().transform(train)
        return v2.Identity() if train else normalisation(self.mean, self.std)
