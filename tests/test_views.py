"""Views of an image for joint-embedding methods (data.views), and VICReg on them."""

import json
import os
import subprocess
import sys

import hydra
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import ROOT, free_port, make_image_folder, run_cli

from trainlab.data.digits import DigitsDataModule
from trainlab.data.fake import FakeDataModule
from trainlab.data.imagefolder import ImageFolderDataModule
from trainlab.data.mnist5k import MNIST5kDataModule
from trainlab.data.stream import StreamDataModule
from trainlab.model.networks.masks import step_generator
from trainlab.model.networks.vicreg import Expander
from trainlab.model.networks.vit import ViTEncoder
from trainlab.model.vicreg import VICReg

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
    shards = tmp_path / "shards"
    command = [sys.executable, str(ROOT / "scripts" / "make_shards.py"), str(folder), str(shards)]
    subprocess.run([*command, "--workers", "1"], check=True, capture_output=True, timeout=300)
    common = dict(batch_size=4, crop_scale=CROP, mean=(0.5,), std=(0.25,))
    yield DigitsDataModule(image_size=16, in_chans=1, **common)
    yield MNIST5kDataModule(image_size=28, in_chans=1, **common)
    rgb = {**common, "mean": (0.5,) * 3, "std": (0.25,) * 3}
    yield FakeDataModule(image_size=16, in_chans=3, **rgb)
    yield ImageFolderDataModule(root=str(folder), image_size=16, in_chans=3, num_classes=2, **rgb)
    yield StreamDataModule(root=str(shards), image_size=16, in_chans=3, num_classes=2, **rgb)


FOLDERS = (ImageFolderDataModule, StreamDataModule)


def first_batch(dm):
    dm.setup("fit")
    images, labels = next(iter(dm.train_dataloader()))
    return dm.on_after_batch_transfer((images, labels), 0), images


def test_views_on_every_data_set_normalise_like_the_single_image(tmp_path):
    """Each data set: a batch is ([view 1, view 2], labels), uint8 out of the loader, the
    views' shapes and count as reciped; normalised on the device to the bit as the single
    image path, whose crop the first view draws again (same seed, same random numbers)."""
    for dm in data_modules(tmp_path):
        single, _ = first_batch(dm)
        kwargs = {k: getattr(dm, k) for k in ("image_size", "in_chans", "batch_size", "crop_scale")}
        viewed = type(dm)(
            **kwargs, mean=dm.mean, std=dm.std, views=views(dm.image_size),
            **({"root": dm.root, "num_classes": 2} if isinstance(dm, FOLDERS) else {}),
        )  # fmt: skip
        (normalised, labels), raw = first_batch(viewed)
        assert isinstance(raw, list) and len(raw) == 2 and all(v.dtype == torch.uint8 for v in raw)
        c, s = dm.in_chans, dm.image_size
        assert raw[0].shape == (4, c, s, s) and raw[1].shape == (4, c, s // 2, s // 2), dm.name
        for view, out in zip(raw, normalised, strict=True):
            assert out.dtype == torch.float32 and torch.equal(out, dm.normalise(view))
        assert torch.equal(normalised[0], single[0]), dm.name  # the single image, to the bit
        assert torch.equal(labels, single[1])


def vicreg(seed: int = 0) -> VICReg:
    torch.manual_seed(seed)
    encoder = ViTEncoder(img_size=16, patch_size=4, in_chans=1, size="vit_tiny", depth=2)
    # depth 1: one linear layer. BatchNorm's statistics would be per rank on CPUs, where
    # torch's SyncBatchNorm does not run (it runs on GPUs: trainer.sync_batchnorm=true).
    expander = lambda in_dim: Expander(in_dim, width=32, depth=1)  # noqa: E731
    return VICReg(encoder, expander, optimizer=torch.optim.AdamW, num_classes=10)


def global_batch():
    g = torch.Generator().manual_seed(3)
    return [torch.randn(8, 1, 16, 16, generator=g) for _ in range(2)]


def _rank(rank: int, port: int, out: dict) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model = vicreg()
    views = [v[rank * 4 : (rank + 1) * 4] for v in global_batch()]
    loss, _ = model.loss(views, step_generator(0, 0, 0))
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    dist.all_reduce(grads)
    grads /= 2  # what DDP does with each rank's gradients
    out[rank] = (loss.item(), grads)
    dist.destroy_process_group()


def test_vicreg_on_two_ranks_is_one_rank_on_the_global_batch():
    """Variance and covariance over the global batch (gather_batch): each of 2 ranks, holding
    half the batch, computes the loss of one process on all of it, and the gradients DDP
    averages are that process's gradients."""
    model = vicreg()
    loss, _ = model.loss(global_batch(), step_generator(0, 0, 0))
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    with mp.Manager() as manager:
        out = manager.dict()
        os.environ.pop("MASTER_ADDR", None)
        mp.spawn(_rank, args=(free_port(), out), nprocs=2, join=True)
        results = dict(out)
    for rank in (0, 1):
        assert results[rank][0] == pytest.approx(loss.item(), rel=1e-5)
        assert torch.allclose(results[rank][1], grads, rtol=1e-4, atol=1e-6)
    # and per-rank statistics would not: the halves alone give another loss
    half, _ = vicreg().loss([v[:4] for v in global_batch()], step_generator(0, 0, 0))
    assert half.item() != pytest.approx(loss.item(), rel=1e-3)


@pytest.mark.slow  # a 2-process run: make test-slow (CI runs it after make test)
def test_vicreg_trains_on_two_ranks_through_train_py_without_warnings(tmp_path):
    """experiment=vicreg_digits on 2 CPU ranks, as a user types it: the memory estimate's
    probe, the gathered loss and the monitors' gather on every rank, then the end-of-run
    feature table sharded over the ranks, with no warning or traceback on the console."""
    result = run_cli(
        "train.py", "experiment=vicreg_digits", "trainer.accelerator=cpu", "trainer.devices=2",
        "trainer.max_epochs=1", "trainer.limit_train_batches=3", "trainer.limit_val_batches=1",
        "test=false", "extras.print_config=false", f"paths.log_dir={tmp_path}", "run_name=vic",
        cwd=tmp_path, timeout=400,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    console = result.stdout + result.stderr
    assert "Warning" not in console and "Traceback" not in console, console[-3000:]
    run = json.loads((tmp_path / "train" / "runs" / "vic" / "metrics.json").read_text())
    assert run["run"]["features_ranks"] == 2 and "features/knn_acc" in run["metrics"]


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
    assert torch.equal(encoder(image), encoder.norm(fixed))
    assert encoder(torch.randn(2, 1, 8, 8)).shape == (2, 4, 192)
    assert encoder.pooled(torch.randn(2, 1, 24, 24)).shape == (2, 192)
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
