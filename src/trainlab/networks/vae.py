"""Variational autoencoders: a diagonal Gaussian posterior q(z | x), a standard normal prior,
and a decoder that outputs the parameters of a pixel likelihood (networks/likelihoods.py).

``ConvVAE`` works at any image size (28, 32, 64 px, gray or RGB): the decoder upsamples
to the exact sizes the encoder went through. ``MLPVAE`` is the fully connected model of the
published binarised-MNIST results (Kingma & Welling 2014; Burda et al. 2016).
"""

import math
from collections.abc import Sequence

import torch
from torch import nn

from trainlab.networks.likelihoods import LIKELIHOODS
from trainlab.utils.ranges import Count


class VAENet(nn.Module):
    """What the LightningModule uses: ``encode``, ``decode``, ``likelihood``, ``latent_dim``."""

    def __init__(self, image_size: Count, in_chans: Count, latent_dim: Count, likelihood: str):
        super().__init__()
        self.image_size, self.in_chans, self.latent_dim = image_size, in_chans, latent_dim
        self.likelihood = LIKELIHOODS[likelihood]()
        self.out_chans = in_chans * self.likelihood.params_per_channel

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log-variance of q(z | x), each (B, latent_dim)."""
        mu, logvar = self.encoder(x).chunk(2, dim=1)
        return mu, logvar

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Likelihood parameters, (B, in_chans x params_per_channel, H, W)."""
        raise NotImplementedError

    @property
    def dims(self) -> int:
        return self.in_chans * self.image_size**2


class ConvVAE(VAENet):
    """Stride-2 convolutions down (one per width), a linear bottleneck, and
    upsample-then-convolve blocks back to the encoder's exact sizes."""

    def __init__(
        self,
        image_size: Count = 32,
        in_chans: Count = 1,
        latent_dim: Count = 32,
        widths: Sequence[Count] = (32, 64, 128),
        likelihood: str = "bernoulli",
    ):
        super().__init__(image_size, in_chans, latent_dim, likelihood)
        sizes = [image_size]
        for _ in widths:
            sizes.append(math.floor((sizes[-1] - 2) / 2) + 1)  # conv k4 s2 p1
        if sizes[-1] < 1:
            raise ValueError(f"{len(widths)} stride-2 layers are too many for {image_size} px")
        down, chans = [], in_chans
        for width in widths:
            down += [nn.Conv2d(chans, width, 4, stride=2, padding=1), nn.SiLU()]
            chans = width
        flat = widths[-1] * sizes[-1] ** 2
        self.encoder = nn.Sequential(*down, nn.Flatten(), nn.Linear(flat, 2 * latent_dim))
        up = [
            nn.Linear(latent_dim, flat),
            nn.SiLU(),
            nn.Unflatten(1, (widths[-1], sizes[-1], sizes[-1])),
        ]
        for width, size in zip(reversed(widths), reversed(sizes[:-1]), strict=True):
            up += [nn.Upsample(size=size), nn.Conv2d(chans, width, 3, padding=1), nn.SiLU()]
            chans = width
        up.append(nn.Conv2d(chans, self.out_chans, 3, padding=1))
        self.decoder = nn.Sequential(*up)

    def decode(self, z):
        return self.decoder(z)


class MLPVAE(VAENet):
    """Fully connected encoder and decoder with ``depth`` hidden layers of ``hidden`` units."""

    def __init__(
        self,
        image_size: Count = 28,
        in_chans: Count = 1,
        latent_dim: int = 40,
        hidden: int = 400,
        depth: int = 1,
        likelihood: str = "bernoulli",
    ):
        super().__init__(image_size, in_chans, latent_dim, likelihood)

        def mlp(n_in: int, n_out: int) -> list[nn.Module]:
            layers, width = [], n_in
            for _ in range(depth):
                layers += [nn.Linear(width, hidden), nn.Tanh()]
                width = hidden
            return [*layers, nn.Linear(width, n_out)]

        self.encoder = nn.Sequential(nn.Flatten(), *mlp(self.dims, 2 * latent_dim))
        self.decoder = nn.Sequential(
            *mlp(latent_dim, self.out_chans * image_size**2),
            nn.Unflatten(1, (self.out_chans, image_size, image_size)),
        )

    def decode(self, z):
        return self.decoder(z)
