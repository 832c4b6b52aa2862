"""I-JEPA with the terms the recipe searches added at laptop scale, none of them in the paper
(research/ijepa_recipe_search.md): at batch 64 on small data the paper's objective let the
features collapse, and VICReg's variance and covariance on the pooled context kept them
apart. With every weight at 0 and no jitter (experiment=ijepa) this is the paper's method.

- ``var_cov``: VICReg's variance + covariance terms (Bardes et al. 2022);
- ``sigreg``: LeJEPA's SIGReg (Balestriero & LeCun 2025), towards an isotropic Gaussian;
- ``invariance``: C-JEPA's term (Mo & Tong 2024), the mean-squared gap to the target
  encoder's pooled features of the whole image;
- ``context_jitter``: the context encoder sees the image under a small random affine
  ({degrees, translate, scale}), the target encoder the image itself.
"""

import torch
import torch.nn.functional as F

from trainlab.losses.sigreg import SIGRegLoss
from trainlab.losses.variance_covariance import VarianceCovarianceLoss
from trainlab.model.ijepa import IJEPA
from trainlab.networks.gather import gather_batch
from trainlab.networks.view_jitter import random_affine
from trainlab.utils.ranges import NonNegative


class RegularisedIJEPA(IJEPA):
    """The terms act on the context encoder's tokens, average-pooled. In training their batch
    statistics are the global batch's (``gather_batch``): 2 ranks equal 1 process. In
    validation they are this rank's: ranks may hold different numbers of validation batches
    (no padding), and a collective there would pair unequal steps."""

    def __init__(
        self,
        *,
        var_cov: NonNegative = 0.0,
        sigreg: NonNegative = 0.0,
        invariance: NonNegative = 0.0,
        context_jitter: dict | None = None,
        **ijepa,
    ):
        super().__init__(**ijepa)
        self.var_cov_loss = VarianceCovarianceLoss()
        self.sigreg_loss = SIGRegLoss()

    def context_view(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        jitter = self.hparams.context_jitter
        return random_affine(images, generator, **jitter) if jitter and self.training else images

    def regularisers(
        self, ctx: torch.Tensor, features: torch.Tensor, generator
    ) -> torch.Tensor | float:
        h = self.hparams
        pooled = ctx.float().mean(dim=1)
        batch = gather_batch(pooled) if self.training and (h.var_cov or h.sigreg) else pooled
        total = 0.0
        if h.var_cov:
            total = total + h.var_cov * self.var_cov_loss(batch)
        if h.sigreg:
            total = total + h.sigreg * self.sigreg_loss(batch, generator)
        if h.invariance:  # the last block's pooled target features, no gradient
            total = total + h.invariance * F.mse_loss(pooled, features[:, -ctx.shape[-1] :].float())
        return total
