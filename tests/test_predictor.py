"""The predictor part: the narrow ViT that I-JEPA's predictor and MAE's decoder are
(networks/predictor.py)."""

import torch

from trainlab.networks.predictor import Predictor


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
