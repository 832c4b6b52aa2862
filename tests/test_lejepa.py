"""LeJEPA, the fourth family (a part, docs/parts/lejepa.md): its loss against the paper's
Algorithm 1 written out by hand (complex characteristic functions, loops), in float64 with
its gradients, and the module's contract: views refused in one line, no state moved, the
monitors fed by the first view."""

import hydra
import pytest
import torch
from conftest import compose_cfg

from trainlab.losses.lejepa import LeJEPALoss
from trainlab.model.lejepa import same_size_runs
from trainlab.networks.projector import Projector
from trainlab.utils.seeding import step_generator


def by_hand(z: torch.Tensor, directions: torch.Tensor, weight: float, global_views: int):
    """Algorithm 1: centres = mean of the global views' embeddings; prediction = mean over
    views, images and dimensions of the squared distance to them; SIGReg per view = N times
    the trapezoid integral over 17 knots in [-5, 5] of |ecf(t) - exp(-t^2/2)|^2 exp(-t^2/2),
    averaged over the directions; then averaged over the views."""
    views, n, _ = z.shape
    centres = sum(z[v] for v in range(global_views)) / global_views
    prediction = sum(((centres - z[v]) ** 2).mean() for v in range(views)) / views
    t = torch.linspace(-5, 5, 17, dtype=z.dtype)
    gaussian = torch.exp(-(t**2) / 2)
    per_view = []
    for v in range(views):
        per_direction = []
        for a in directions.T:
            x = z[v] @ a  # one 1-D projection of the N embeddings
            ecf = torch.stack([torch.exp(1j * tk * x).mean() for tk in t])
            err = (ecf - gaussian).abs() ** 2 * gaussian
            integral = sum((err[k] + err[k + 1]) / 2 * (t[k + 1] - t[k]) for k in range(16))
            per_direction.append(integral * n)
        per_view.append(sum(per_direction) / len(per_direction))
    sigreg = sum(per_view) / views
    return (1 - weight) * prediction + weight * sigreg, prediction, sigreg


def test_the_loss_is_the_papers_algorithm_with_its_gradients():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 5, 4, generator=g, dtype=torch.float64)  # 2 global views + 1 local
    criterion = LeJEPALoss(sigreg_weight=0.3, slices=6, global_views=2)
    # The directions the loss draws from the step's generator, drawn again here.
    directions = torch.randn(4, 6, generator=torch.Generator().manual_seed(7)).double()
    directions = directions / directions.norm(dim=0)
    ours_z = z.clone().requires_grad_()
    hand_z = z.clone().requires_grad_()
    loss, terms = criterion.double()(ours_z.double(), torch.Generator().manual_seed(7))
    expected, prediction, sigreg = by_hand(hand_z, directions, 0.3, 2)
    # LeJEPALoss computes in float32 (as under bf16 autocast): float32's error, not float64's.
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert terms["prediction"].item() == pytest.approx(prediction.item(), rel=1e-5)
    assert terms["sigreg"].item() == pytest.approx(sigreg.item(), rel=1e-5)
    loss.backward()
    expected.backward()
    assert torch.allclose(ours_z.grad, hand_z.grad, rtol=1e-4, atol=1e-6)


def test_sigreg_is_small_for_a_standard_gaussian_batch_and_large_otherwise():
    """N times the statistic stays of order 1 under N(0, I); a collapsed batch or a wider
    Gaussian is over 100 times that."""
    g = torch.Generator().manual_seed(0)
    sigreg = LeJEPALoss(sigreg_weight=1.0, slices=64).sigreg
    gaussian = torch.randn(2, 512, 16, generator=g)
    collapsed = torch.randn(1, 1, 16, generator=g).expand(2, 512, 16) * 0.01
    low = sigreg(gaussian, step_generator(0, 0, 0))
    assert low < 2
    assert sigreg(collapsed, step_generator(0, 0, 0)) > 100 * low
    assert sigreg(3 * gaussian, step_generator(0, 0, 0)) > 100 * low


def test_views_of_one_size_go_through_the_encoder_together():
    big, small = torch.zeros(2, 1, 16, 16), torch.zeros(2, 1, 8, 8)
    runs = same_size_runs([big, big, small, small, small])
    assert [len(r) for r in runs] == [2, 3]


def test_the_projector_narrows_to_its_own_width():
    projector = Projector(in_dim=32, hidden=64, out_dim=8, depth=3)
    assert projector(torch.randn(4, 32)).shape == (4, 8)
    widths = [m.out_features for m in projector if isinstance(m, torch.nn.Linear)]
    assert widths == [64, 64, 8]


SMALL = ["experiment=lejepa_digits", "model.encoder.depth=1", "data.batch_size=16"]


def views(batch=16):
    g = torch.Generator().manual_seed(0)
    big = [torch.randn(batch, 1, 16, 16, generator=g) for _ in range(2)]
    return big + [torch.randn(batch, 1, 8, 8, generator=g) for _ in range(4)]


def test_the_module_trains_every_network_and_moves_no_state(tmp_path):
    cfg = compose_cfg(tmp_path, SMALL)
    model = hydra.utils.instantiate(cfg.model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    loss, features = model.loss(views(), step_generator(0, 0, 0))
    assert loss.isfinite() and features.shape == (16, model.monitored_blocks * 192)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    loss.backward()
    assert model.encoder.patch_embed.proj.weight.grad.abs().sum() > 0
    assert model.projector[0].weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="LeJEPA reads 2 global views"):
        model.loss([torch.randn(2, 1, 16, 16)], step_generator(0, 0, 0))
