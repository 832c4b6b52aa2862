"""Views of an image for joint-embedding methods (data.views), and VICReg on them."""

import hydra
import pytest
import torch
from conftest import make_image_folder

from trainlab.data.digits import DigitsDataModule
from trainlab.data.fake import FakeDataModule
from trainlab.data.imagefolder import ImageFolderDataModule
from trainlab.data.mnist5k import MNIST5kDataModule
from trainlab.networks.vit import ViTEncoder
from trainlab.utils.seeding import step_generator

# The first view is the single-image path's crop (no flip, no colour); the second a smaller
# crop at half the size, as multi-crop recipes have.
CROP = [0.3, 1.0]


def views(size: int) -> list[dict]:
    return [
        {"crop_scale": CROP, "hflip": 0.0, "color_jitter": 0.0, "grayscale": 0.0},
        {"crop_scale": [0.1, 0.5], "size": size // 2, "blur": 0.5, "solarize": 0.2},
    ]


def data_modules(tmp_path):
    folder = make_image_folder(tmp_path / "folder", per_class=8, size=20)
    common = dict(batch_size=4, crop_scale=CROP, mean=(0.5,), std=(0.25,))
    yield DigitsDataModule(image_size=16, in_chans=1, **common)
    yield MNIST5kDataModule(image_size=28, in_chans=1, **common)
    rgb = {**common, "mean": (0.5,) * 3, "std": (0.25,) * 3}
    yield FakeDataModule(image_size=16, in_chans=3, **rgb)
    yield ImageFolderDataModule(root=str(folder), image_size=16, in_chans=3, num_classes=2, **rgb)


def first_batch(dm):
    dm.setup("fit")
    images, labels = next(iter(dm.train_dataloader()))
    return dm.on_after_batch_transfer((images, labels), 0), images


def check_views_normalise_like_the_single_image(dm) -> None:
    """A batch is ([view 1, view 2], labels), uint8 out of the loader, the views' shapes and
    count as reciped; normalised on the device to the bit as the single image path, whose
    crop the first view draws again (same seed, same random numbers)."""
    single, _ = first_batch(dm)
    same = ("root", "num_classes", "image_size", "in_chans", "batch_size", "crop_scale")
    kwargs = {k: getattr(dm, k) for k in same}
    viewed = type(dm)(**kwargs, mean=dm.mean, std=dm.std, views=views(dm.image_size))
    (normalised, labels), raw = first_batch(viewed)
    assert isinstance(raw, list) and len(raw) == 2 and all(v.dtype == torch.uint8 for v in raw)
    c, s = dm.in_chans, dm.image_size
    assert raw[0].shape == (4, c, s, s) and raw[1].shape == (4, c, s // 2, s // 2), dm.name
    for view, out in zip(raw, normalised, strict=True):
        assert out.dtype == torch.float32 and torch.equal(out, dm.normalise(view))
    assert torch.equal(normalised[0], single[0]), dm.name  # the single image, to the bit
    assert torch.equal(labels, single[1])


@pytest.mark.slow  # 13 s: make test-slow, which CI runs
def test_views_on_every_data_set_normalise_like_the_single_image(tmp_path):
    for dm in data_modules(tmp_path):
        check_views_normalise_like_the_single_image(dm)


def test_sync_batchnorm_on_cpus_is_refused_before_the_ranks_start(cfg_factory):
    from trainlab.strategy.checks import check_launch
    from trainlab.utils.errors import ConfigError

    cfg = cfg_factory("trainer.accelerator=cpu", "trainer.devices=2", "trainer.sync_batchnorm=true")
    with pytest.raises(ConfigError, match="sync_batchnorm=true runs on GPUs only"):
        check_launch(cfg)


def test_the_encoder_takes_any_multiple_of_its_patch_on_its_own_call_path():
    """Multi-crop: global and local crops through one encoder. timm's dynamic_img_size path
    (patch_embed, then _pos_embed resampling the position table); at img_size the table is
    the one the encoder was built with, so the tokens match the fixed path exactly."""
    torch.manual_seed(0)
    encoder = ViTEncoder(img_size=16, patch_size=4, in_chans=1, size="vit_tiny", depth=1)
    image = torch.randn(2, 1, 16, 16)
    fixed = encoder.blocks(encoder.patch_embed(image).flatten(1, 2) + encoder.pos_embed)
    assert torch.equal(encoder.forward_features(image), encoder.norm(fixed))
    assert encoder.forward_features(torch.randn(2, 1, 8, 8)).shape == (2, 4, 192)
    assert encoder(torch.randn(2, 1, 24, 24)).shape == (2, 192)
    with pytest.raises(AssertionError, match="divisible by patch size"):
        encoder(torch.randn(2, 1, 10, 10))


def test_views_of_two_sizes_train_through_one_method(tmp_path):
    """A 16-px and an 8-px view of each image through one VICReg loss and its backward: a
    batch of two sizes in one step ("Input height (8) doesn't match model (16)" before)."""
    from conftest import compose_cfg

    cfg = compose_cfg(
        tmp_path, ["experiment=vicreg_digits", "model.encoder.depth=1", "data.batch_size=8"]
    )
    model = hydra.utils.instantiate(cfg.model)
    views = [torch.randn(8, 1, 16, 16), torch.randn(8, 1, 8, 8)]
    loss, features = model.loss(views, step_generator(0, 0, 0))
    loss.backward()
    assert loss.isfinite() and features.shape[0] == 8
    assert model.encoder.patch_embed.proj.weight.grad.abs().sum() > 0
