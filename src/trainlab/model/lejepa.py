"""LeJEPA (Balestriero & LeCun 2025, arXiv 2511.08544): views of one image, embedded by the
encoder and a projector, each predict the mean embedding of the image's global views, while
SIGReg pulls every view's embeddings toward an isotropic Gaussian (losses/lejepa.py). No
teacher, no EMA, no stop-gradient; one trade-off weight. Multi-crop: ``data.views`` lists
the global views first and the smaller local views after them."""

import torch

from trainlab.losses.lejepa import LeJEPALoss
from trainlab.model.self_supervised import SelfSupervised
from trainlab.networks.encoder import pooled_and_layers, pooled_width
from trainlab.networks.gather import gather_batch
from trainlab.utils.ranges import Count, OpenFraction


class LeJEPA(SelfSupervised):
    """``projector`` is a partial of ``Projector``, completed with the encoder's width.
    ``global_views``: how many of the first views the centres average (the paper's 2).
    ``sigreg_weight``: SIGReg's share of the loss (lambda). ``slices``: SIGReg's random
    directions a step. The embeddings are the global batch's (gathered over ranks), so
    SIGReg's statistic is one process's."""

    trained = ("encoder", "projector")

    def __init__(
        self,
        encoder: torch.nn.Module,
        projector,
        global_views: Count = 2,
        sigreg_weight: OpenFraction = 0.02,
        slices: Count = 1024,
        **base,
    ):
        super().__init__(encoder, **base)
        self.projector = projector(in_dim=pooled_width(encoder))
        self.criterion = LeJEPALoss(sigreg_weight, slices, global_views)

    def loss(self, views, generator: torch.Generator):
        g = self.hparams.global_views
        if not isinstance(views, list) or len(views) < max(2, g):
            got = len(views) if isinstance(views, list) else "no"
            raise ValueError(
                f"LeJEPA reads {g} global views and any local ones, not {got}: give data.views "
                f"at least {max(2, g)} recipes, the global ones first"
            )
        embeddings, features = [], None
        for group in same_size_runs(views):  # one forward for the views of one size
            batch = torch.cat(group)
            if features is None:  # the first view's last layers feed the monitors
                pooled, layers = pooled_and_layers(self.encoder, batch, self.monitored_blocks)
                features = torch.cat(layers, dim=1)[: len(views[0])].detach()
            else:
                pooled = self.encoder(batch)
            embeddings += self.projector(pooled).chunk(len(group))
        # (V, B, K) -> the global batch of every view, one collective: (V, world * B, K)
        z = gather_batch(torch.stack(embeddings, dim=1)).transpose(0, 1)
        loss, terms = self.criterion(z, generator)
        if self.training:
            self.log_numbers({f"train/{k}": v.detach() for k, v in terms.items()})
        return loss, features

    def evaluate(self, images: torch.Tensor, generator: torch.Generator):
        return None, self.monitored_features(images)


def same_size_runs(views: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Consecutive views of one shape, grouped: the global views, then the local ones."""
    runs: list[list[torch.Tensor]] = []
    for view in views:
        if runs and runs[-1][0].shape == view.shape:
            runs[-1].append(view)
        else:
            runs.append([view])
    return runs
