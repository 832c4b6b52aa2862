"""The synthetic data part: data=synthetic (data/synthetic.py), seeded uint8 images already
at the model's size, for benchmarks."""

import torch

from trainlab.data.synthetic import SyntheticDataModule


def test_synthetic_data_is_seeded_uint8_at_size_and_normalised_like_the_eval_split():
    def first(seed: int):
        dm = SyntheticDataModule(image_size=24, in_chans=3, batch_size=8, seed=seed, pool=4)
        dm.setup()
        return dm, next(iter(dm.train_dataloader()))

    dm, (images, labels) = first(0)
    assert images.dtype == torch.uint8 and images.shape == (8, 3, 24, 24)
    assert torch.equal(first(0)[1][0], images) and not torch.equal(first(1)[1][0], images)
    raw, _ = dm.train_set.dataset[0]  # the eval transform of the same image, to the bit
    normalised = dm.on_after_batch_transfer((raw[None], labels[:1]), 0)[0]
    assert torch.equal(normalised[0], dm.transform(train=False)(raw))
