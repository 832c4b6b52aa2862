"""DINO's loss (Caron et al. 2021): the cross-entropy between the teacher's centred and
sharpened distribution over prototypes on each global view and the student's on every other
view."""

import torch
import torch.nn.functional as F
from torch import nn


class DINOLoss(nn.Module):
    """``student_temp`` / ``teacher_temp``: the softmax temperatures; a teacher colder than
    the student sharpens. The centre (the EMA of the teacher's mean output) is the caller's
    state: it is subtracted here and moved by the method after the step."""

    def __init__(self, student_temp: float = 0.1, teacher_temp: float = 0.04):
        super().__init__()
        self.student_temp, self.teacher_temp = student_temp, teacher_temp

    def targets(self, teacher: list[torch.Tensor], center: torch.Tensor) -> list[torch.Tensor]:
        """The teacher's distributions, one per global view."""
        return [F.softmax((t - center) / self.teacher_temp, dim=-1) for t in teacher]

    def forward(self, student: list[torch.Tensor], targets: list[torch.Tensor]) -> torch.Tensor:
        """``student``: the student's logits on every view, the global ones first; ``targets``:
        ``self.targets(...)`` of the global views. The mean over every (target i, view j != i)."""
        log_probs = [F.log_softmax(s / self.student_temp, dim=-1) for s in student]
        terms = [
            -(target * log_probs[j]).sum(dim=-1).mean()
            for i, target in enumerate(targets)
            for j in range(len(log_probs))
            if j != i
        ]
        return torch.stack(terms).mean()
