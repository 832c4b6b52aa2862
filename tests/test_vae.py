"""The VAE: likelihoods normalise, shapes fit every size, the importance-weighted bound
behaves as theory says, KL warm-up, pictures, and DDP training."""

import json
import math
import re
from functools import partial

import pytest
import torch
from conftest import FAST, compose_cfg, logged_series, run_cli
from PIL import Image

from trainlab.eval import evaluate
from trainlab.model.vae import VAE
from trainlab.networks.likelihoods import Bernoulli, DiscretizedLogistic
from trainlab.networks.vae import MLPVAE, ConvVAE
from trainlab.training import train


def test_discretized_logistic_is_a_distribution_over_256_values():
    levels = torch.arange(256.0).view(256, 1, 1, 1) / 255  # every 8-bit value of one pixel
    for mean, log_scale in [(0.0, -2.0), (0.7, -4.0), (-0.99, -1.0), (0.3, -6.5)]:
        params = torch.tensor([mean, log_scale]).view(1, 2, 1, 1).expand(256, 2, 1, 1)
        total = DiscretizedLogistic().log_prob(levels, params).exp().sum()
        assert total.item() == pytest.approx(1.0, abs=1e-3), (mean, log_scale)


def test_bernoulli_sums_to_one_and_binarises():
    logits = torch.randn(1, 1, 1, 1).expand(2, 1, 1, 1)
    both = torch.tensor([0.0, 1.0]).view(2, 1, 1, 1)
    assert Bernoulli().log_prob(both, logits).exp().sum().item() == pytest.approx(1.0)
    x = Bernoulli().prepare(torch.full((1000,), 0.3), torch.Generator().manual_seed(0))
    assert set(x.unique().tolist()) == {0.0, 1.0} and abs(x.mean().item() - 0.3) < 0.05


@pytest.mark.parametrize("size", [28, 32, 64])
@pytest.mark.parametrize(
    "chans, likelihood", [(1, "bernoulli"), (3, "discretized_logistic"), (3, "gaussian")]
)
def test_conv_vae_decodes_to_the_input_size(size, chans, likelihood):
    net = ConvVAE(size, chans, latent_dim=8, widths=(8, 16, 16), likelihood=likelihood)
    x = net.likelihood.prepare(torch.rand(2, chans, size, size))
    mu, logvar = net.encode(x)
    assert mu.shape == logvar.shape == (2, 8)
    params = net.decode(mu)
    assert params.shape == (2, chans * net.likelihood.params_per_channel, size, size)
    assert torch.isfinite(net.likelihood.log_prob(x, params)).all()


def make_vae(**kwargs):
    torch.manual_seed(0)
    net = MLPVAE(image_size=8, latent_dim=4, hidden=32)
    return VAE(net, partial(torch.optim.Adam, lr=1e-3), **kwargs)


def exact_nll(vae, x: torch.Tensor) -> torch.Tensor:
    """-log p(x) of a 1-d latent, integrated numerically: log sum_z p(x | z) N(z; 0, 1) dz
    on a grid of 20,001 points over [-10, 10] (the prior's mass outside is below 1e-22)."""
    z = torch.linspace(-10, 10, 20001)
    with torch.no_grad():
        params = vae.net.decode(z[:, None])  # (Z, C, H, W)
        log_px = torch.stack(
            [vae.net.likelihood.log_prob(xi.expand(len(z), *xi.shape), params) for xi in x]
        )
    log_pz = -0.5 * (z**2 + math.log(2 * math.pi))
    return -(torch.logsumexp(log_px + log_pz, dim=1) + math.log(z[1] - z[0]))


def test_importance_weighting_approaches_the_exact_likelihood_from_above():
    """With a 1-d latent -log p(x) is computable: the k-sample estimate stays above it on
    average (it is a bound), and its gap shrinks as k grows. Dropping the estimator's
    "- log k" would put it log k below the exact value, which this catches."""
    torch.manual_seed(0)
    net = MLPVAE(image_size=2, latent_dim=1, hidden=16)
    with torch.no_grad():  # a sharper decoder: the untrained q(z | x) is a poor proposal
        for layer in net.decoder:
            if isinstance(layer, torch.nn.Linear):
                layer.weight.mul_(3)
    vae = VAE(net, partial(torch.optim.Adam, lr=1e-3))
    x = vae.net.likelihood.prepare(torch.rand(256, 1, 2, 2), torch.Generator().manual_seed(1))
    exact = exact_nll(vae, x).mean()
    gaps = []
    for k in (1, 10, 100, 1000):
        with torch.no_grad():
            estimate = vae.importance_weighted_nll(x, k, generator=torch.Generator().manual_seed(k))
        gaps.append(float(estimate.mean() - exact))
    # Measured: 0.62, 0.002, -0.008, 0.0001 nats (sampling noise of a mean over 256 images).
    assert gaps[0] > 0.3, gaps  # the one-sample ELBO is loose here
    assert gaps[1] < 0.1 * gaps[0], gaps  # ten samples close most of the gap
    assert all(gap > -0.02 for gap in gaps), gaps  # never below the exact value (but noise)
    assert abs(gaps[3]) < 0.01, gaps


def test_gaussian_likelihood_is_normalised():
    """exp(log_prob) + log 256 per pixel is a density in x: it integrates to 1."""
    from trainlab.networks.likelihoods import Gaussian

    x = torch.linspace(-1.5, 2.5, 400001)[:, None, None, None]  # (N, 1, 1, 1)
    params = torch.tensor([0.3, math.log(0.1)]).expand(len(x), 2)[:, :, None, None]
    density = torch.exp(Gaussian().log_prob(x, params) + math.log(256))
    assert float(torch.trapezoid(density, x.flatten())) == pytest.approx(1.0, abs=1e-4)


def test_kl_warmup_reaches_beta_at_the_configured_step():
    vae = make_vae(beta=0.5, kl_warmup_steps=100)
    weights = [vae.kl_weight(step) for step in (0, 50, 99, 100, 1000)]
    assert weights == pytest.approx([0.0, 0.25, 0.495, 0.5, 0.5])
    assert make_vae(beta=2.0).kl_weight(0) == 2.0  # no warm-up


@pytest.mark.slow  # 23 s: make test-slow, which CI runs
def test_vae_digits_run_writes_pictures_and_honest_metrics(tmp_path, capsys):
    cfg = compose_cfg(
        tmp_path, ["experiment=vae_digits", *FAST, "model.kl_warmup_steps=2", "model.beta=0.5"]
    )
    train(cfg)
    flops = re.search(r"Total FLOPs: (\S+)", capsys.readouterr().out)
    assert flops and flops[1] != "0"  # the model summary ran the VAE on an image
    run_dir = tmp_path / "run"
    for name in ("reconstructions.png", "samples.png"):
        with Image.open(run_dir / "pictures" / name) as picture:
            assert min(picture.size) >= 96 and len(set(picture.getdata())) > 2
    metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    for key in ("val/elbo", "val/rec", "val/kl", "test/nll", "test/elbo"):
        assert math.isfinite(metrics[key]), key
    assert metrics["train/kl_weight"] == 0.5  # warmed up after 2 of its 3 steps
    assert metrics["test/nll"] <= -metrics["test/elbo"]
    assert "test/bpd" not in metrics  # binarised data: nats only
    # Evaluation is seeded (binarisation and importance samples): eval.py repeats it.
    best = json.loads((run_dir / "metrics.json").read_text())["checkpoints"]["best"]
    again = evaluate(
        compose_cfg(tmp_path / "e", [f"ckpt_path={best}", "trainer.limit_test_batches=2"], "eval")
    )
    assert again["test/nll"] == pytest.approx(metrics["test/nll"], rel=1e-6)
    # Its frozen features cannot be rated: one line says so and points to mode=test.
    features = run_cli("eval.py", "mode=features", f"ckpt_path={best}", cwd=tmp_path)
    lines = [line for line in features.stderr.splitlines() if line.startswith("error")]
    assert features.returncode == 2 and len(lines) == 1 and "mode=test" in lines[0], lines


@pytest.mark.slow  # a 2-process run: make test-slow (CI runs it after make test)
def test_vae_ddp_bf16_accumulation_trains(tmp_path):
    """2 gloo processes, bf16-mixed, accumulation 2: the VAE needs no distributed code."""
    result = run_cli(
        "train.py",
        "experiment=vae_digits",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "trainer.precision=bf16-mixed",
        "trainer.accumulate_grad_batches=2",
        "trainer.max_epochs=2",
        "trainer.log_every_n_steps=1",
        "model.kl_warmup_steps=0",
        "model.test_importance_samples=8",
        "extras.print_config=false",
        f"paths.log_dir={tmp_path}",
        "run_name=vae_ddp",
        cwd=tmp_path,
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "train" / "runs" / "vae_ddp"
    results = json.loads((run_dir / "metrics.json").read_text())
    assert results["run"]["world_size"] == 2 and results["run"]["accumulate_grad_batches"] == 2
    losses = logged_series(run_dir, "train/loss")
    assert len(losses) >= 10
    assert sum(losses[-3:]) < 0.95 * sum(losses[:3]), losses
