"""The ViT encoder and the predictor: shapes, timm compatibility, token selection."""

import subprocess
import sys

import pytest
import timm
import torch

from trainlab.networks.patch_stem import PatchCNN
from trainlab.networks.predictor import Predictor
from trainlab.networks.vit import ViTEncoder


def test_vit_huge_patch14_matches_timm_parameter_for_parameter():
    with torch.device("meta"):
        ours = ViTEncoder(img_size=224, patch_size=14, size="vit_huge")
        reference = timm.create_model("vit_huge_patch14_gap_224", pretrained=False, num_classes=0)
    ours_sd, ref_sd = ours.state_dict(), reference.state_dict()
    assert {k: v.shape for k, v in ours_sd.items()} == {k: v.shape for k, v in ref_sd.items()}
    assert round(sum(p.numel() for p in ours.parameters()) / 1e6, 1) == 630.8


def test_keeping_all_tokens_is_the_full_forward_and_positions_are_frozen():
    torch.manual_seed(0)
    enc = ViTEncoder(img_size=32, patch_size=4, in_chans=1, size="vit_tiny", depth=2).eval()
    x = torch.randn(2, 1, 32, 32)
    everything = torch.arange(64).expand(2, 64)
    assert torch.allclose(enc(x, everything), enc.forward_features(x), atol=1e-5)
    assert enc(x, everything[:, :10]).shape == (2, 10, 192)
    assert not enc.pos_embed.requires_grad
    assert enc(x).shape == (2, 192)


def test_the_cnn_patch_stem_keeps_each_token_to_its_own_patch():
    torch.manual_seed(0)
    enc = ViTEncoder(img_size=28, patch_size=7, in_chans=1, size="vit_tiny", depth=1, stem_width=8)
    x = torch.randn(2, 1, 28, 28)
    y = x.clone()
    y[0, 0, 6, 7] += 5  # the last row of patch 0, the first column of patch 1 (row-major)
    changed = (enc.patch_embed(y) - enc.patch_embed(x)).abs().sum(-1).flatten(1)  # (B, H, W)
    assert changed[0].nonzero().flatten().tolist() == [1] and not changed[1].any()
    assert enc.forward_features(x).shape == (2, 16, 192) and enc.grid == (4, 4)


def test_the_cnn_patch_stem_as_matrices_computes_what_its_convolutions_compute():
    """Small patches run each conv as one matmul (patch_stem.conv_as_matrix): same outputs,
    same gradients for the conv weights, as running the Conv2d layers themselves."""
    torch.manual_seed(0)
    stem = PatchCNN(in_chans=3, embed_dim=32, patch_size=7, width=4)
    patches = torch.randn(10, 3, 7, 7)
    fast = stem.as_matrices(patches.flatten(1))
    fast_grads = torch.autograd.grad(fast.square().sum(), list(stem.parameters()))
    slow = stem.proj(stem.convs(patches)).flatten(1)
    slow_grads = torch.autograd.grad(slow.square().sum(), list(stem.parameters()))
    assert torch.allclose(fast, slow, atol=1e-5)
    for a, b in zip(fast_grads, slow_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


def test_activation_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    plain = ViTEncoder(img_size=32, patch_size=4, in_chans=1, size="vit_tiny", depth=2)
    ckpt = ViTEncoder(
        img_size=32, patch_size=4, in_chans=1, size="vit_tiny", depth=2, grad_checkpointing=True
    )
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(2, 1, 32, 32)
    plain(x).sum().backward()
    ckpt(x).sum().backward()
    for a, b in zip(plain.parameters(), ckpt.parameters(), strict=True):
        if a.grad is not None:
            assert torch.allclose(a.grad, b.grad, atol=1e-5)


def test_predictor_predicts_each_target_block_separately():
    torch.manual_seed(0)
    pred = Predictor(grid=(8, 8), embed_dim=64, pred_dim=32, depth=2, num_heads=4).eval()
    context, context_idx = torch.randn(2, 20, 64), torch.randint(0, 64, (2, 20))
    targets = torch.randint(0, 64, (2, 3, 5))
    out = pred(context, context_idx, targets)
    assert out.shape == (2, 3, 5, 64)
    # Block 0's prediction does not depend on block 1's positions.
    moved = targets.clone()
    moved[:, 1] = (moved[:, 1] + 7) % 64
    assert torch.allclose(pred(context, context_idx, moved)[:, 0], out[:, 0], atol=1e-5)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("tokens, dim, heads", [(50, 192, 3), (197, 384, 6), (17, 96, 4)])
def test_block_flops_formula_matches_torch_flop_counter(tokens, dim, heads, fused):
    """trainlab.networks.flops against FlopCounterMode, forward and forward + backward (3x),
    with attention as matmuls and as the CPU's fused kernel (whose formula flops.py adds to
    the counter: without it, attention counts 0 and the fused case fails)."""
    from timm.models.vision_transformer import Block
    from torch.utils.flop_counter import FlopCounterMode

    from trainlab.networks.flops import block_flops

    block = Block(dim, heads, mlp_ratio=4.0)
    block.attn.fused_attn = fused
    x = torch.randn(2, tokens, dim, requires_grad=True)
    with FlopCounterMode(display=False) as forward:
        y = block(x)
    with FlopCounterMode(display=False) as backward:
        y.sum().backward()
    expected = 2 * block_flops(tokens, dim, 4 * dim)
    assert forward.get_total_flops() == pytest.approx(expected, rel=0.02)
    total = forward.get_total_flops() + backward.get_total_flops()
    assert total == pytest.approx(3 * expected, rel=0.02)


def test_patch_embed_flops_formula_matches_torch_flop_counter():
    """flops.patch_embed_flops against FlopCounterMode for the CNN stem run as convolutions
    (patches above MATRIX_MAX_PATCH) and for timm's linear embedding, on 2 images."""
    from timm.layers import PatchEmbed
    from torch.utils.flop_counter import FlopCounterMode

    from trainlab.networks.flops import patch_embed_flops
    from trainlab.networks.patch_stem import MATRIX_MAX_PATCH, ConvPatchEmbed

    p = MATRIX_MAX_PATCH + 2
    for embed in (
        ConvPatchEmbed(img_size=2 * p, patch_size=p, in_chans=3, embed_dim=32, width=8),
        PatchEmbed(img_size=2 * p, patch_size=p, in_chans=3, embed_dim=32),
    ):
        with FlopCounterMode(display=False) as counted:
            embed(torch.randn(2, 3, 2 * p, 2 * p))
        assert counted.get_total_flops() == 2 * 4 * patch_embed_flops(embed)  # 2 images x 4 patches


def test_networks_import_no_lightning_and_nothing_above_them():
    """Imports only go down: a fork can take networks/ into any training loop."""
    code = (
        "import sys, pkgutil, importlib, trainlab.networks as n\n"
        "for m in pkgutil.iter_modules(n.__path__): importlib.import_module(f'{n.__name__}.{m.name}')\n"
        "print(' '.join(sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert not [m for m in loaded if m.split(".")[0] in ("lightning", "pytorch_lightning")]
    above = ("trainlab.model.", "trainlab.run", "trainlab.strategy", "trainlab.callbacks")
    # trainlab/__init__.py registers the config's monitor resolver (model/monitor.py).
    assert [m for m in loaded if m.startswith(above) and not m.startswith("trainlab.networks")] == [
        "trainlab.model.monitor"
    ]
