"""Export a run's target encoder as a timm state dict.

    python scripts/export_encoder.py logs/train/runs/<run>/checkpoints/last.ckpt encoder.safetensors

The file loads into the matching timm model, e.g. for the ijepa experiment:
    timm.create_model("vit_huge_patch14_gap_224", num_classes=0, pretrained=True,
                      pretrained_cfg_overlay={"file": "encoder.safetensors"})
A CNN patch stem (``model.encoder.stem_width``, as in ijepa_mnist) is not timm's: pass
``embed_layer=trainlab.model.networks.patch_stem.patch_embed_layer(<stem_width>)`` to
timm's VisionTransformer as well.
"""

import argparse

from trainlab.model.networks.weights import export_target_encoder

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("out", help=".safetensors or .pth")
    args = parser.parse_args()
    print(f"wrote {export_target_encoder(args.ckpt, args.out)}")
