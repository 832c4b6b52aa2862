"""VAE training and honest evaluation: the ELBO with beta, KL warm-up and free bits, and an
importance-weighted estimate of the negative log-likelihood (Burda et al. 2016) at test time.

All likelihood and KL terms are computed in float32 even under bf16/16-bit autocast.
Values are per image in nats; bits/dim are added for 8-bit likelihoods.
"""

import math

import lightning as L
import torch
from torchmetrics import MeanMetric

from trainlab.model.summary_input import summary_input
from trainlab.networks.vae import VAENet
from trainlab.optim.fused import fused_by_default
from trainlab.utils.ranges import NonNegative, NonNegativeInt

EVAL_SEED = 1234  # fixes the binarisation / dequantisation noise of evaluation batches


class VAE(L.LightningModule):
    """Args:
    net: a ``VAENet`` (networks/vae.py).
    optimizer: partial of a torch optimizer.
    beta: weight of the KL term once warmed up.
    kl_warmup_steps: the KL weight rises linearly from 0 to ``beta`` over this many
        optimizer steps (0 = ``beta`` from the start).
    free_bits: nats per latent dimension below which the KL is not penalised
        (Kingma et al. 2016), averaged over the batch; 0 = off.
    val_importance_samples / test_importance_samples: k of the importance-weighted NLL
        estimate logged as ``val/nll`` / ``test/nll`` (0 = not computed).
    """

    monitor, monitor_mode = "val/elbo", "max"  # optimized_metric unless the config says otherwise

    def __init__(
        self,
        net: VAENet,
        optimizer,
        beta: NonNegative = 1.0,
        kl_warmup_steps: NonNegativeInt = 0,
        free_bits: NonNegative = 0.0,
        val_importance_samples: NonNegativeInt = 0,
        test_importance_samples: NonNegativeInt = 100,
    ):
        super().__init__()
        self.save_hyperparameters(logger=False, ignore=["net", "optimizer"])
        self.net, self.make_optimizer = net, optimizer
        self.metrics = torch.nn.ModuleDict(
            {
                f"{stage}_{name}": MeanMetric()
                for stage in ("val", "test")
                for name in ("elbo", "rec", "kl", "nll", "bpd")
            }
        )

    def kl_weight(self, step: int | None = None) -> float:
        step = self.global_step if step is None else step
        warmup = self.hparams.kl_warmup_steps
        return self.hparams.beta * (min(1.0, step / warmup) if warmup else 1.0)

    def posterior(self, x: torch.Tensor):
        mu, logvar = self.net.encode(x)
        return mu.float(), logvar.float().clamp(-30, 20)

    def terms(self, x: torch.Tensor, generator: torch.Generator | None = None) -> dict:
        """Per-image reconstruction log-likelihood and KL(q || p) per latent dimension."""
        mu, logvar = self.posterior(x)
        eps = torch.randn(mu.shape, generator=generator, device=mu.device)
        z = mu + eps * torch.exp(0.5 * logvar)
        log_px = self.net.likelihood.log_prob(x, self.net.decode(z))
        kl_dims = 0.5 * (mu**2 + logvar.exp() - 1 - logvar)  # analytic, (B, latent)
        return {"rec": -log_px, "kl_dims": kl_dims}

    def training_step(self, batch, batch_idx):
        x = self.net.likelihood.prepare(batch[0])  # fresh binarisation / noise each step
        terms = self.terms(x)
        rec, kl_dims = terms["rec"].mean(), terms["kl_dims"]
        kl = kl_dims.sum(1).mean()
        if self.hparams.free_bits > 0:
            kl_penalised = kl_dims.mean(0).clamp(min=self.hparams.free_bits).sum()
        else:
            kl_penalised = kl
        weight = self.kl_weight()
        loss = rec + weight * kl_penalised
        self.log_dict(
            {"train/loss": loss, "train/rec": rec, "train/kl": kl, "train/kl_weight": weight},
            on_step=True,
            on_epoch=False,
            prog_bar=False,
        )
        self.log(
            "train/elbo", -(rec + kl), on_step=False, on_epoch=True, prog_bar=True, sync_dist=True
        )
        return loss

    @torch.no_grad()
    def importance_weighted_nll(
        self, x: torch.Tensor, k: int, chunk: int = 50, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """-log p(x) estimated with k importance samples from q(z | x), per image (nats).

        log p(x) >= log mean_k p(x, z_k) / q(z_k | x); k = 1 is the (sampled) ELBO and the
        bound tightens as k grows.
        """
        mu, logvar = self.posterior(x)
        std = torch.exp(0.5 * logvar)
        log_w = []
        for start in range(0, k, chunk):
            n = min(chunk, k - start)
            eps = torch.randn(n, *mu.shape, generator=generator, device=mu.device)
            z = mu + eps * std  # (n, B, latent)
            params = self.net.decode(z.flatten(0, 1))
            log_px = self.net.likelihood.log_prob(x.repeat(n, *[1] * (x.dim() - 1)), params)
            log_pz = -0.5 * (z**2 + math.log(2 * math.pi)).sum(-1)
            log_qz = -0.5 * (eps**2 + math.log(2 * math.pi) + logvar).sum(-1)
            log_w.append(log_px.view(n, -1) + log_pz - log_qz)
        return -(torch.logsumexp(torch.cat(log_w), dim=0) - math.log(k))

    def _evaluate(self, batch, batch_idx: int, stage: str, k: int) -> None:
        generator = torch.Generator(batch[0].device).manual_seed(EVAL_SEED + batch_idx)
        # Seeded per batch: evaluation (binarisation, noise, samples) repeats exactly.
        x = self.net.likelihood.prepare(batch[0], generator=generator)
        terms = self.terms(x, generator)
        rec, kl = terms["rec"], terms["kl_dims"].sum(1)
        values = {"elbo": -(rec + kl), "rec": rec, "kl": kl}
        if k:
            values["nll"] = self.importance_weighted_nll(x, k, generator=generator)
        if self.net.likelihood.discrete_256:  # 8-bit data: bits per dimension
            values["bpd"] = values.get("nll", -values["elbo"]) / (self.net.dims * math.log(2))
        for name, value in values.items():
            metric = self.metrics[f"{stage}_{name}"]
            metric.update(value)
            self.log(f"{stage}/{name}", metric, prog_bar=name in ("elbo", "nll"))

    def validation_step(self, batch, batch_idx):
        self._evaluate(batch, batch_idx, "val", self.hparams.val_importance_samples)

    def test_step(self, batch, batch_idx):
        self._evaluate(batch, batch_idx, "test", self.hparams.test_importance_samples)

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Images decoded from z ~ N(0, I): the likelihood's mean, in [0, 1]."""
        z = torch.randn(n, self.net.latent_dim, generator=generator).to(self.device)
        return self.net.likelihood.mean(self.net.decode(z))

    @torch.no_grad()
    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        mu, _ = self.posterior(x)
        return self.net.likelihood.mean(self.net.decode(mu))

    def setup(self, stage: str) -> None:
        self.example_input_array = summary_input(self.trainer)

    forward = reconstruct  # what the model summary runs for its FLOPs

    def configure_optimizers(self):
        return fused_by_default(self.make_optimizer)(params=self.parameters())
