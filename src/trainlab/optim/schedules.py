"""Per-step schedules as plain functions of (step, total): LR, weight decay, EMA momentum.

torch's LR schedulers cover the learning rate only; I-JEPA also schedules weight decay
and EMA momentum on the same step counter, so all three live here side by side.
"""

import inspect
import math


def warmup_steps(warmup_epochs: float, total: int, max_epochs: int | None) -> int:
    """Warm-up epochs in optimizer steps, for a run of ``total`` steps over ``max_epochs``."""
    return int(warmup_epochs * (total / max(1, max_epochs or 1)))


def peak_lr(optimizer) -> float:
    """The learning rate's peak: the ``lr`` the optimizer is given (model.optimizer.lr), or
    its class's default. One key, so a sweep, lr_scaling and the schedule read the same."""
    given = getattr(optimizer, "keywords", {}).get("lr")
    if given is None:
        given = inspect.signature(optimizer).parameters["lr"].default
    return float(given)


def warmup_cosine(
    step: int, total: int, warmup: int, start: float, peak: float, final: float
) -> float:
    """Linear from ``start`` to ``peak`` over ``warmup`` steps, then cosine to ``final``."""
    if step < warmup:
        return start + (peak - start) * step / max(1, warmup)
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return final + (peak - final) * 0.5 * (1.0 + math.cos(math.pi * progress))


def cosine(step: int, total: int, start: float, end: float) -> float:
    """Cosine from ``start`` at step 0 to ``end`` at ``total`` (I-JEPA's weight decay)."""
    progress = min(1.0, step / max(1, total))
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * progress))


def linear(step: int, total: int, start: float, end: float) -> float:
    """Linear from ``start`` to ``end`` (I-JEPA's EMA momentum, 0.996 -> 1.0)."""
    return start + (end - start) * min(1.0, step / max(1, total))
