"""Each loss alone, without Lightning: what it rewards and what it punishes, on batches whose
answer is known. The methods' own tests check that they call them."""

import subprocess
import sys

import pytest
import torch
from conftest import ROOT

from trainlab.losses.sigreg import SIGRegLoss
from trainlab.losses.variance_covariance import VarianceCovarianceLoss
from trainlab.losses.vicreg import VICRegLoss


def test_the_losses_import_no_lightning():
    """Every loss file there is, the methods that are parts included."""
    losses = sorted(p.stem for p in (ROOT / "src" / "trainlab" / "losses").glob("[!_]*.py"))
    code = (
        "import sys, importlib\n"
        f"for name in {losses!r}: importlib.import_module('trainlab.losses.' + name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_variance_covariance_penalises_collapse_not_spread():
    variance_covariance = VarianceCovarianceLoss()
    g = torch.Generator().manual_seed(0)
    spread = torch.randn(4096, 8, generator=g)
    collapsed = torch.ones(4096, 8) + 1e-3 * spread  # every image the same embedding
    correlated = spread[:, :1].expand(-1, 8)  # unit variance, but one direction only
    assert variance_covariance(spread) < 0.05
    assert variance_covariance(collapsed) > 0.9
    assert variance_covariance(correlated) > 5


def test_sigreg_is_small_for_a_standard_gaussian_and_large_for_collapse_or_wrong_scale():
    sigreg = SIGRegLoss()
    g = torch.Generator().manual_seed(0)
    gaussian = torch.randn(256, 32, generator=g)
    distance = lambda z: sigreg(z, torch.Generator().manual_seed(1)).item()  # noqa: E731
    assert distance(gaussian) < 2  # B x the sampling noise of 256 draws, about 1
    assert distance(torch.ones(256, 32) + 1e-3 * gaussian) > 20  # every image the same
    assert distance(3 * gaussian) > 20  # isotropic but not unit scale: var_cov would pass it
    assert distance(gaussian[:, :1].expand(-1, 32)) > 5  # one direction only


def test_vicreg_is_zero_invariance_for_equal_views_and_weighs_its_terms():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(512, 16, generator=g)
    loss, terms = VICRegLoss(invariance=25, variance=25, covariance=1)(z, z)
    assert terms["invariance"] == 0
    assert loss == pytest.approx(25 * terms["variance"] + terms["covariance"])
    other = torch.randn(512, 16, generator=g)
    _, apart = VICRegLoss()(z, other)
    assert apart["invariance"] > 1.5  # two independent unit Gaussians: E|z1 - z2|^2 / D = 2
    collapsed = torch.zeros(512, 16)
    _, flat = VICRegLoss()(collapsed, collapsed)
    assert flat["variance"] == pytest.approx(1 - 0.01, abs=1e-6)  # relu(1 - sqrt(0 + 1e-4))


def vicreg_as_published(z1, z2, lam=25.0, mu=25.0, nu=1.0):
    """Bardes et al. 2022, eq. 1-6 and Algorithm 1, written out: s + mu * (v(z1) + v(z2)) / 2
    ... as the paper's pseudo-code averages the two std hinges and sums the two covariance
    penalties, each the squared off-diagonal of the unbiased covariance over d."""
    n, d = z1.shape
    invariance = ((z1 - z2) ** 2).mean()
    hinge = lambda z: torch.relu(1 - torch.sqrt(z.var(dim=0) + 1e-4)).mean()  # noqa: E731

    def penalty(z):
        z = z - z.mean(dim=0)
        cov = z.T @ z / (n - 1)
        return (cov**2).sum() / d - (torch.diagonal(cov) ** 2).sum() / d

    return lam * invariance + mu * (hinge(z1) + hinge(z2)) / 2 + nu * (penalty(z1) + penalty(z2))


def test_vicreg_is_the_published_loss_on_hand_checked_values_and_gradients():
    """Two views of 2 images in 2 dimensions: z1 = [[1, 1], [-1, -1]], z2 = [[1, -1], [-1, 1]].
    Invariance: squared differences 0, 4, 0, 4, mean 2. Variance: each std sqrt(2 + 1e-4)
    is above 1, no hinge. Covariance: each view's off-diagonal is +-2, squared twice over
    d = 2 gives 4 a view, summed 8. Loss 25 * 2 + 0 + 8 = 58 (averaging the views'
    covariance would give 54). A collapsed pair hinges at 1 - 0.01 per view."""
    z1 = torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)
    z2 = torch.tensor([[1.0, -1.0], [-1.0, 1.0]], dtype=torch.float64)
    loss, terms = VICRegLoss()(z1, z2)
    assert (terms["invariance"].item(), terms["variance"].item()) == (2.0, 0.0)
    assert terms["covariance"].item() == pytest.approx(8.0) and loss.item() == pytest.approx(58.0)
    _, flat = VICRegLoss()(torch.zeros(2, 2), torch.zeros(2, 2))
    assert flat["variance"].item() == pytest.approx(0.99) and flat["covariance"] == 0
    g = torch.Generator().manual_seed(0)
    for n, d in [(3, 4), (16, 8), (64, 33)]:
        a, b = (torch.randn(n, d, generator=g, dtype=torch.float64) * 0.7 for _ in range(2))
        a.requires_grad_(), b.requires_grad_()
        ours = VICRegLoss()(a.float(), b.float())[0].double()  # the loss computes in float32
        grads = torch.autograd.grad(ours, (a, b))
        published = vicreg_as_published(a, b)
        expected = torch.autograd.grad(published, (a, b))
        assert ours.item() == pytest.approx(published.item(), rel=1e-5)
        for got, want in zip(grads, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_vicreg_computes_in_float32_under_bf16_inputs():
    z = torch.randn(64, 8).bfloat16()
    loss, terms = VICRegLoss()(z, z)
    assert loss.dtype == torch.float32 and all(t.dtype == torch.float32 for t in terms.values())
