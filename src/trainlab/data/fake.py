"""torchvision's FakeData: random images for smoke tests of any shape."""

from torchvision.datasets import FakeData

from trainlab.data.base import ImageDataModule
from trainlab.utils.ranges import Count


class FakeDataModule(ImageDataModule):
    name = "fake"

    def __init__(self, train_size: Count = 256, test_size: Count = 64, **kwargs):
        super().__init__(**kwargs)
        self.train_size, self.test_size = train_size, test_size

    def build_splits(self):
        shape = (self.in_chans, self.image_size, self.image_size)
        make = lambda n, offset: FakeData(  # noqa: E731
            n, shape, self.num_classes, random_offset=offset
        )
        return make(self.train_size, 0), None, make(self.test_size, 10**6)
