"""MAE, the second method on SelfSupervised: masks, patches, and a loss that trains."""

import hydra
import pytest
import torch
from conftest import compose_cfg

from trainlab.losses.masked_pixels import MaskedPixelLoss
from trainlab.networks.mae import patchify, random_masks
from trainlab.utils.seeding import step_generator


def test_random_masks_split_every_image_into_visible_and_masked():
    masks = random_masks(8, torch.Generator().manual_seed(0), num_patches=16, mask_ratio=0.75)
    assert masks.context.shape == (8, 4) and masks.targets.shape == (8, 1, 12)
    both = torch.cat([masks.context, masks.targets[:, 0]], dim=1).sort(dim=1).values
    assert torch.equal(both, torch.arange(16).expand(8, 16))  # disjoint, and all patches
    assert not torch.equal(masks.context[0], masks.context[1])  # random per image


def test_patchify_orders_tokens_as_the_vit_grid():
    images = torch.randn(2, 3, 8, 8)
    tokens = patchify(images, 4)
    assert tokens.shape == (2, 4, 48)
    # token 1 is the top-right patch; its first channel's pixels come first per position
    patch = images[0, :, 0:4, 4:8]  # (C, 4, 4)
    assert torch.equal(tokens[0, 1], patch.permute(1, 2, 0).reshape(-1))


def test_mae_loss_trains_encoder_and_decoder(tmp_path):
    cfg = compose_cfg(tmp_path, ["experiment=mae_digits", "model.encoder.depth=1"])
    model = hydra.utils.instantiate(cfg.model)
    data = hydra.utils.instantiate(cfg.data)
    data.setup()
    images, _ = data.on_after_batch_transfer(next(iter(data.train_dataloader())), 0)
    optimizer = torch.optim.AdamW(
        [p for n in ("encoder", "decoder") for p in getattr(model, n).parameters()], lr=1e-3
    )
    losses = []
    for _ in range(30):  # the same batch and masks: the loss must fall
        loss, features = model.loss(images, step_generator(0, 0, 0))
        optimizer.zero_grad()
        loss.backward()
        losses.append(loss.item())
        optimizer.step()
    assert model.encoder.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
    assert features.shape == (len(images), model.encoder.embed_dim) and not features.requires_grad
    assert losses[-1] < 0.8 * losses[0]  # 0.98 -> 0.72 here


def test_masked_pixel_loss_standardises_each_target_patch_as_the_official_mae():
    """He et al. 2022, models_mae.py's norm_pix_loss: (x - mean) / sqrt(unbiased var + 1e-6)
    per patch. The patch [1, 2, 3, 4]: mean 2.5, unbiased variance 5/3, so the targets are
    +-1.5 and +-0.5 over sqrt(5/3): squares 1.35 and 0.15, and a zero prediction's loss is
    their mean, 0.75 (layer norm's biased variance would give 1.0)."""
    patch = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]], dtype=torch.float64)
    zero = torch.zeros_like(patch).requires_grad_()
    loss = MaskedPixelLoss()(zero, patch)
    assert loss.item() == pytest.approx(0.75 * (5 / 3) / (5 / 3 + 1e-6), rel=1e-6)
    (grad,) = torch.autograd.grad(loss, zero)  # d/dpred mean((pred - t)^2) = 2 (pred - t) / 4
    expected = (
        -2 * torch.tensor([-1.5, -0.5, 0.5, 1.5], dtype=torch.float64) / (4 * (5 / 3 + 1e-6) ** 0.5)
    )
    torch.testing.assert_close(grad.reshape(-1), expected, rtol=1e-6, atol=1e-7)
    g = torch.Generator().manual_seed(0)
    target = torch.randn(2, 5, 12, generator=g)
    mean, var = target.mean(-1, keepdim=True), target.var(-1, keepdim=True)
    pred = (target - mean) / (var + 1e-6).sqrt()
    shifted = 3 * target + 7  # each patch's mean and scale change, not its pattern
    assert MaskedPixelLoss(norm_pix=True)(pred, shifted) < 1e-8
    assert MaskedPixelLoss(norm_pix=False)(pred, shifted) > 1
    assert MaskedPixelLoss(norm_pix=False)(target, target) == 0
