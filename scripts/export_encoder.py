"""Export a run's evaluated encoder (the method's ``evaluated``: I-JEPA's and DINO's EMA
target, VICReg's encoder) as a timm state dict.

    python scripts/export_encoder.py logs/train/runs/<run>/checkpoints/last.ckpt encoder.safetensors

The file loads into the timm model of the run's ``model.encoder``, e.g. for the ijepa
experiment, or a ResNet-18 (configs/model/encoder/resnet.yaml) on 1-channel digits:
    timm.create_model("vit_huge_patch14_gap_224", num_classes=0, pretrained=True,
                      pretrained_cfg_overlay={"file": "encoder.safetensors"})
    timm.create_model("resnet18", num_classes=0, in_chans=1, pretrained=True,
                      pretrained_cfg_overlay={"file": "encoder.safetensors"})
A CNN patch stem (``model.encoder.stem_width``, as in ijepa_mnist) is not timm's: pass
``embed_layer=trainlab.networks.patch_stem.patch_embed_layer(<stem_width>)`` to
timm's VisionTransformer as well.
"""

import argparse
import sys
from pathlib import Path

from trainlab.networks.weights import export_encoder
from trainlab.run.run_dir import check_output
from trainlab.utils.errors import UserError

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("out", type=Path, help=".safetensors or .pth")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    parser.add_argument(
        "--part", default="evaluated", help="evaluated (default), encoder or target_encoder"
    )
    args = parser.parse_args()
    try:
        check_output(args.out, args.force)
        print(f"wrote {export_encoder(args.ckpt, args.out, args.part)}")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
