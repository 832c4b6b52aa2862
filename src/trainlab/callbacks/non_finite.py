"""Non-finite gradients before an optimizer step: stop with one line, or skip the step.

Checked on the gradients (a NaN or inf loss makes them non-finite too) right before the
optimizer step, once per step also under accumulation, with one all-reduced flag so
every rank takes the same decision. Skipping drops the step's gradients, so the weights
and the optimizer state stay those of the last good step; the count is logged as
``train/skipped_steps``. Under 16-mixed, torch's GradScaler already skips such steps.
"""

from typing import Literal

import lightning as L
import torch

from trainlab.utils.logging import get_logger

log = get_logger(__name__)


class NonFiniteGuard(L.Callback):
    def __init__(self, action: Literal["stop", "skip"] = "stop"):
        if action not in ("stop", "skip"):
            raise ValueError(f"action must be 'stop' or 'skip', not {action!r}")
        self.action = action
        self.skipped = 0

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module, optimizer) -> None:
        if trainer.precision == "16-mixed":
            return
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        local = [getattr(g, "_local_tensor", g) for g in grads]  # FSDP2: this rank's shard
        local = [g for g in local if g.numel()]  # a small parameter's shard can be empty
        finite = all_finite(local)
        finite = trainer.strategy.reduce_boolean_decision(finite, all=True)
        if not finite:
            self._stop_or_skip(trainer, optimizer)
        if self.action == "skip":  # a running count, logged every step
            pl_module.log("train/skipped_steps", float(self.skipped), on_step=True, on_epoch=False)

    def _stop_or_skip(self, trainer: L.Trainer, optimizer) -> None:
        values = describe_terms(trainer.callback_metrics)
        if self.action == "stop":
            raise FloatingPointError(
                f"non-finite loss at step {trainer.global_step} ({values}); the last good "
                f"checkpoint is kept in {trainer.default_root_dir}/checkpoints: lower the "
                "learning rate, set trainer.gradient_clip_val, or "
                "callbacks.non_finite.action=skip"
            )
        # No gradients: AdamW and SGD leave such parameters (and their state) as they are.
        optimizer.zero_grad(set_to_none=True)
        self.skipped += 1
        log.warning(f"skipped step {trainer.global_step}: non-finite loss ({values})")

    def state_dict(self) -> dict:
        return {"skipped": self.skipped}

    def load_state_dict(self, state_dict: dict) -> None:
        self.skipped = state_dict["skipped"]


def all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether no tensor holds a NaN or an inf. One fused 2-norm over all of them: a NaN or
    inf makes it non-finite, and on a CPU it runs ~8x faster than the max-norm (measured on
    the ijepa_mnist gradients: 0.4 against 3.3 ms, the max-norm was 3 % of the step). A
    2-norm also overflows on huge finite values (above ~1e19 in float32), so only then is
    the exact max-norm, which cannot overflow, asked."""
    if not tensors:
        return True
    if torch.nn.utils.get_total_norm(tensors, norm_type=2.0).isfinite():
        return True
    return bool(torch.nn.utils.get_total_norm(tensors, norm_type=float("inf")).isfinite())


def describe_terms(metrics: dict) -> str:
    """This step's logged train/ values, the non-finite ones (the culprits) first."""
    terms = {
        k: float(v)
        for k, v in metrics.items()
        if k.startswith("train/") and not k.endswith("_epoch") and v.numel() == 1
    }
    order = sorted(terms, key=lambda k: (torch.isfinite(torch.tensor(terms[k])).item(), k))
    return ", ".join(f"{k}={terms[k]:.4g}" for k in order) or "no train/ values logged"
