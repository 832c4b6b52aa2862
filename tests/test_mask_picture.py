"""The mask picture part: I-JEPA's context and target blocks drawn over validation images."""

import torch
from conftest import FAST, compose_cfg
from PIL import Image

from trainlab.callbacks.mask_overlay import CONTEXT_RGB, TARGET_RGB, overlay
from trainlab.training import train


def test_overlay_colours_each_block_and_leaves_the_rest():
    """A 2x2 grid of 2-px patches on a black image: patch 0 context, patch 3 the first
    target; patches 1 and 2 stay black, the blocks take their colour at the given alpha."""
    images = torch.zeros(1, 1, 4, 4)
    picture = overlay(images, torch.tensor([[0]]), torch.tensor([[[3]]]), (2, 2), 2, alpha=0.5)
    assert picture.shape == (1, 3, 4, 4)
    assert torch.allclose(picture[0, :, 0, 0], CONTEXT_RGB * 0.5)
    assert torch.allclose(picture[0, :, 3, 3], TARGET_RGB[0] * 0.5)
    assert picture[0, :, 0, 3].abs().sum() == 0 and picture[0, :, 3, 0].abs().sum() == 0


def test_an_ijepa_run_keeps_its_mask_picture(tmp_path):
    train(compose_cfg(tmp_path, [*FAST, "experiment=ijepa_digits", "model.encoder.depth=2"]))
    picture = Image.open(tmp_path / "run" / "pictures" / "masks.png")
    assert picture.mode == "RGB" and min(picture.size) > 32
