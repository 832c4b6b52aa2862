"""VICReg's network (Bardes et al. 2022): the expander between the encoder and the loss
(losses/vicreg.py)."""

from torch import nn

from trainlab.networks.global_batch_norm import GlobalBatchNorm1d
from trainlab.utils.ranges import Count


class Expander(nn.Sequential):
    """VICReg's expander: ``depth`` linear layers of ``width``, BatchNorm and ReLU between
    them. The BatchNorm's statistics are the global batch's on any backend
    (global_batch_norm.py); the expander is never evaluated, so it needs no running ones."""

    def __init__(self, in_dim: int, width: Count = 1024, depth: Count = 3):
        layers: list[nn.Module] = []
        dims = [in_dim] + [width] * depth
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            layers.append(nn.Linear(a, b))
            if i < depth - 1:
                layers += [GlobalBatchNorm1d(b), nn.ReLU(inplace=True)]
        super().__init__(*layers)
