"""scikit-learn's handwritten digits: 1,797 real 8x8 gray images shipped inside the package.

The default data set: it needs no download, so ``python train.py`` runs anywhere.
"""

import torch
from sklearn.datasets import load_digits
from torch.utils.data import TensorDataset, random_split

from trainlab.data.base import ImageDataModule
from trainlab.utils.ranges import OpenFraction


class DigitsDataModule(ImageDataModule):
    name, classes = "digits", 10

    def __init__(self, test_fraction: OpenFraction = 0.2, **kwargs):
        kwargs.setdefault("in_chans", 1)
        kwargs.setdefault("num_classes", 10)
        super().__init__(**kwargs)
        self.test_fraction = test_fraction

    def build_splits(self):
        digits = load_digits()
        # Pixel values are 0..16; scale to uint8 so the shared transforms treat them as images.
        images = torch.tensor(digits.images * (255 / 16), dtype=torch.uint8).unsqueeze(1)
        data = TensorDataset(images, torch.tensor(digits.target))
        # There is no official test split: hold out a fixed, seeded one.
        n_test = round(len(data) * self.test_fraction)
        generator = torch.Generator().manual_seed(12345)
        test, train = random_split(data, [n_test, len(data) - n_test], generator=generator)
        return train, None, test
