"""Decoder likelihoods p(x | z) for images in [0, 1]: Bernoulli, Gaussian, discretised logistic.

Each one says how many decoder output channels it needs per image channel, how to prepare
the data it models (binarise, dequantise), and returns ``log p(x | params)`` summed over
pixels, in float32 whatever the autocast dtype (the sum of many small terms is where half
precision loses the most).
"""

import math

import torch
import torch.nn.functional as F


class Likelihood:
    params_per_channel = 1
    discrete_256 = False  # log-likelihood of 8-bit data, so bits/dim are meaningful

    def prepare(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return x

    def log_prob(self, x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def mean(self, params: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class Bernoulli(Likelihood):
    """Binary pixels: the data is binarised by sampling each pixel with its gray value as
    probability (fresh samples per step in training; a seeded generator fixes them for
    evaluation), the protocol of the published binarised-MNIST numbers."""

    def prepare(self, x, generator=None):
        return torch.bernoulli(x.clamp(0, 1), generator=generator)

    def log_prob(self, x, params):
        logits = params.float()
        return (
            -F.binary_cross_entropy_with_logits(logits, x.float(), reduction="none")
            .flatten(1)
            .sum(1)
        )

    def mean(self, params):
        return torch.sigmoid(params.float())


class Gaussian(Likelihood):
    """A diagonal Gaussian with a learned per-pixel scale, on uniformly dequantised 8-bit
    data, so that its negative log density plus D log 256 bounds the 8-bit NLL."""

    params_per_channel = 2
    discrete_256 = True

    def prepare(self, x, generator=None):
        noise = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        return (x * 255 + noise) / 256

    def log_prob(self, x, params):
        mean, log_scale = params.float().chunk(2, dim=1)
        log_scale = log_scale.clamp(min=-7.0)
        z = (x.float() - mean) * torch.exp(-log_scale)
        log_p = -0.5 * z**2 - log_scale - 0.5 * math.log(2 * math.pi)
        # Density on [0, 1) -> probability mass of the 8-bit value: divide by 256 per pixel.
        return log_p.flatten(1).sum(1) - x[0].numel() * math.log(256)

    def mean(self, params):
        return params.float().chunk(2, dim=1)[0].clamp(0, 1)


class DiscretizedLogistic(Likelihood):
    """One logistic per pixel, integrated over each of the 256 intensity bins (PixelCNN++,
    Salimans et al. 2017, with a single mixture component)."""

    params_per_channel = 2
    discrete_256 = True

    def log_prob(self, x, params):
        mean, log_scale = params.float().chunk(2, dim=1)
        log_scale = log_scale.clamp(min=-7.0)
        x = x.float() * 2 - 1  # [0, 1] -> [-1, 1]; bins are 2/255 wide
        inv_scale = torch.exp(-log_scale)
        centered = x - mean
        cdf_plus = torch.sigmoid(inv_scale * (centered + 1 / 255))
        cdf_minus = torch.sigmoid(inv_scale * (centered - 1 / 255))
        log_cdf_plus = (inv_scale * (centered + 1 / 255)) - F.softplus(
            inv_scale * (centered + 1 / 255)
        )
        log_one_minus_cdf_min = -F.softplus(inv_scale * (centered - 1 / 255))
        mid = inv_scale * centered
        log_pdf_mid = (
            mid - log_scale - 2 * F.softplus(mid)
        )  # for bins where cdf differences underflow
        log_prob_mid = torch.where(
            cdf_plus - cdf_minus > 1e-5,
            torch.log((cdf_plus - cdf_minus).clamp(min=1e-12)),
            log_pdf_mid - math.log(127.5),
        )
        log_p = torch.where(
            x < -0.999, log_cdf_plus, torch.where(x > 0.999, log_one_minus_cdf_min, log_prob_mid)
        )
        return log_p.flatten(1).sum(1)

    def mean(self, params):
        return ((params.float().chunk(2, dim=1)[0] + 1) / 2).clamp(0, 1)


LIKELIHOODS = {
    "bernoulli": Bernoulli,
    "gaussian": Gaussian,
    "discretized_logistic": DiscretizedLogistic,
}
