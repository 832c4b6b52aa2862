"""The teacher of a self-distillation method: a copy of the student that no gradient reaches,
moved only by the EMA of SelfSupervised.update_target (``ema_pairs``)."""

import copy

from torch import nn


def teacher_of(student: nn.Module) -> nn.Module:
    """A deep copy of ``student`` with every parameter frozen (I-JEPA's target encoder, DINO's
    teacher backbone and head)."""
    return copy.deepcopy(student).requires_grad_(False)
