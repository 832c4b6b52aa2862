"""Export a run's target encoder as a timm state dict.

    python scripts/export_encoder.py logs/train/runs/<run>/checkpoints/last.ckpt encoder.safetensors

The file loads into the matching timm model, e.g. for the ijepa experiment:
    timm.create_model("vit_huge_patch14_gap_224", num_classes=0, pretrained=True,
                      pretrained_cfg_overlay={"file": "encoder.safetensors"})
A CNN patch stem (``model.encoder.stem_width``, as in ijepa_mnist) is not timm's: pass
``embed_layer=trainlab.networks.patch_stem.patch_embed_layer(<stem_width>)`` to
timm's VisionTransformer as well.
"""

import argparse
import sys
from pathlib import Path

from trainlab.networks.weights import export_target_encoder
from trainlab.run.run_dir import owning_run
from trainlab.utils.errors import UserError


def check_output(out: Path, force: bool) -> None:
    """Never into a run dir (only a run writes there), never over a file unless --force;
    the output's folder is made where it is missing."""
    if (run := owning_run(out)) is not None:
        raise UserError(f"{out} is inside the run dir {run}: write the export outside run dirs")
    if out.exists() and not force:
        raise UserError(f"{out} exists: choose another path, or pass --force to replace it")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot make the folder {out.parent}: {e.strerror}") from None


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("out", type=Path, help=".safetensors or .pth")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    args = parser.parse_args()
    try:
        check_output(args.out, args.force)
        print(f"wrote {export_target_encoder(args.ckpt, args.out)}")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
