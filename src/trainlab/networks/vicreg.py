"""VICReg's network (Bardes et al. 2022): the expander between the encoder and the loss
(losses/vicreg.py)."""

from trainlab.networks.projector import Projector
from trainlab.utils.ranges import Count


class Expander(Projector):
    """VICReg's expander: a projector of ``depth`` linear layers, all ``width`` wide."""

    def __init__(self, in_dim: int, width: Count = 1024, depth: Count = 3):
        super().__init__(in_dim, hidden=width, out_dim=width, depth=depth)
