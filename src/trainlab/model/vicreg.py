"""VICReg (Bardes et al. 2022): two augmented views of an image, embedded by the encoder and
an expander; invariance between the views, variance and covariance of each, over the global
batch (gathered over ranks, with gradients)."""

import torch

from trainlab.losses.vicreg import VICRegLoss
from trainlab.model.self_supervised import SelfSupervised
from trainlab.networks.encoder import pooled_and_layers, pooled_width
from trainlab.networks.gather import gather_batch
from trainlab.utils.ranges import NonNegative


class VICReg(SelfSupervised):
    """``expander`` is a partial of ``Expander``, completed with the encoder's width. The
    loss weights are the paper's (25, 25, 1). Needs ``data.views`` with 2 views; validation
    and test batches are single images: the monitors read the encoder, there is no val loss."""

    trained = ("encoder", "expander")

    def __init__(
        self,
        encoder: torch.nn.Module,
        expander,
        invariance: NonNegative = 25.0,
        variance: NonNegative = 25.0,
        covariance: NonNegative = 1.0,
        **base,
    ):
        super().__init__(encoder, **base)
        self.expander = expander(in_dim=pooled_width(encoder))
        self.criterion = VICRegLoss(invariance, variance, covariance)

    def loss(self, views, generator: torch.Generator):
        if not isinstance(views, list) or len(views) != 2:
            got = len(views) if isinstance(views, list) else "no"
            raise ValueError(
                f"VICReg reads 2 views an image, not {got}: give data.views two recipes"
            )
        pooled, layers = pooled_and_layers(self.encoder, views[0], self.monitored_blocks)
        features = torch.cat(layers, dim=1)
        z1 = gather_batch(self.expander(pooled))
        z2 = gather_batch(self.expander(self.encoder(views[1])))
        loss, terms = self.criterion(z1, z2)
        if self.training:
            self.log_numbers({f"train/{k}": v.detach() for k, v in terms.items()})
        return loss, features.detach()

    def evaluate(self, images: torch.Tensor, generator: torch.Generator):
        return None, self.monitored_features(images)
