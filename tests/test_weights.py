"""Weight export (timm) of a run's encoder, on synthetic files, no download; I-JEPA's imports
(official checkpoints, timm files) are in test_ijepa_weights.py."""

import torch
from timm.models.vision_transformer import VisionTransformer

from trainlab.networks.patch_stem import patch_embed_layer
from trainlab.networks.vit import ViTEncoder
from trainlab.networks.weights import export_encoder


def timm_loads_strictly(path, enc, **kwargs) -> VisionTransformer:
    """timm's VisionTransformer of ``enc``'s shape, with the exported file loaded strictly."""
    reference = VisionTransformer(
        img_size=enc.patch_embed.img_size[0],
        patch_size=enc.patch_embed.patch_size[0],
        in_chans=enc.patch_embed.proj.in_channels,
        num_classes=0,
        global_pool="avg",
        class_token=False,
        fc_norm=False,
        embed_dim=enc.embed_dim,
        depth=len(enc.blocks),
        num_heads=enc.blocks[0].attn.num_heads,
        **kwargs,
    )
    reference.load_state_dict(torch.load(path, weights_only=True), strict=True)
    return reference


def test_an_encoder_with_a_cnn_stem_exports_to_timm_given_its_embed_layer(tmp_path):
    """ijepa_mnist's CNN patch stem is not timm's: timm loads the export strictly once it
    builds the same stem (scripts/export_encoder.py says how)."""
    torch.manual_seed(0)
    enc = ViTEncoder(img_size=28, patch_size=7, in_chans=1, size="vit_tiny", depth=2, stem_width=8)
    ckpt = tmp_path / "last.ckpt"
    torch.save(
        {"state_dict": {f"target_encoder.{k}": v for k, v in enc.state_dict().items()}}, ckpt
    )
    out = export_encoder(ckpt, tmp_path / "encoder.pth")
    reference = timm_loads_strictly(out, enc, embed_layer=patch_embed_layer(8))
    x = torch.randn(2, 1, 28, 28)
    assert torch.allclose(reference.eval()(x), enc.eval()(x), atol=1e-5)
