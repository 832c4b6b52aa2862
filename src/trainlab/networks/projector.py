"""A projector between an encoder and a loss on embeddings (LeJEPA's, SimCLR's, VICReg's
expander): ``depth`` linear layers, BatchNorm and ReLU between them, narrowing to its own
output width. The BatchNorm's statistics are the global batch's on any backend
(global_batch_norm.py); a projector is never evaluated, so it needs no running ones."""

from torch import nn

from trainlab.networks.global_batch_norm import GlobalBatchNorm1d
from trainlab.utils.ranges import Count


class Projector(nn.Sequential):
    def __init__(self, in_dim: int, hidden: Count = 2048, out_dim: Count = 128, depth: Count = 3):
        layers: list[nn.Module] = []
        dims = [in_dim] + [hidden] * (depth - 1) + [out_dim]
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            layers.append(nn.Linear(a, b))
            if i < depth - 1:
                layers += [GlobalBatchNorm1d(b), nn.ReLU(inplace=True)]
        super().__init__(*layers)
