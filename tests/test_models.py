"""The ViT encoder: shapes, timm compatibility, token selection."""

import subprocess
import sys

import timm
import torch

from trainlab.networks.patch_stem import PatchCNN
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
