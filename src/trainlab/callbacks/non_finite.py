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
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

from trainlab.utils import lightning_internals
from trainlab.utils.logging import get_logger

log = get_logger(__name__)


class NonFiniteGuard(L.Callback):
    def __init__(self, action: Literal["stop", "skip"] = "stop"):
        if action not in ("stop", "skip"):
            raise ValueError(f"action must be 'stop' or 'skip', not {action!r}")
        self.action = action
        self.skipped = 0
        self._first_bad = torch.tensor(-1)  # the first step with non-finite gradients, on device

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module, optimizer) -> None:
        if trainer.precision == "16-mixed":
            return
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        local = [getattr(g, "_local_tensor", g) for g in grads]  # FSDP2: this rank's shard
        local = [g for g in local if g.numel()]  # a small parameter's shard can be empty
        if self.action == "skip":
            finite = bool(all_finite(local))
            if isinstance(trainer.strategy, (FSDPStrategy, ModelParallelStrategy)):
                finite = trainer.strategy.reduce_boolean_decision(finite, all=True)
            if not finite:
                self._stop_or_skip(trainer, optimizer, trainer.global_step)
            pl_module.log("train/skipped_steps", float(self.skipped), on_step=True, on_epoch=False)
            return
        if local:
            step = torch.full((), trainer.global_step, device=local[0].device)
            bad = ~all_finite(local) & (self._first_bad < 0)
            self._first_bad = torch.where(bad, step, self._first_bad.to(step.device))
        if lightning_internals.should_update_logs(trainer):
            self._read(trainer, optimizer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module) -> None:
        self._read(trainer, None)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module, checkpoint: dict) -> None:
        self._read(trainer, None)  # never a checkpoint with weights from a bad step

    def _read(self, trainer: L.Trainer, optimizer) -> None:
        """The lazily kept decision of ``stop``: raise if any step since the last read had
        non-finite gradients (on any rank)."""
        if self.action != "stop":
            return
        first_bad = self._first_bad
        if isinstance(trainer.strategy, (FSDPStrategy, ModelParallelStrategy)):
            first_bad = first_bad.float().to(trainer.strategy.root_device)
            first_bad = trainer.strategy.reduce(first_bad, reduce_op="max")
        step = int(first_bad.item())
        if step >= 0:
            self._first_bad = torch.tensor(-1)  # read once: the error's own save checks again
            self._stop_or_skip(trainer, optimizer, step)

    def _stop_or_skip(self, trainer: L.Trainer, optimizer, step: int) -> None:
        values = describe_terms(trainer.callback_metrics)
        if self.action == "stop":
            raise FloatingPointError(
                f"non-finite loss at step {step} ({values}); the last good "
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


def all_finite(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Whether no tensor holds a NaN or an inf, as a bool tensor on their device (read
    without a host sync on a GPU). On a GPU the exact max-norm, which cannot overflow. On a
    CPU one fused 2-norm decides the common case, ~8x faster than the max-norm (measured on
    the ijepa_mnist gradients: 0.4 against 3.3 ms, the max-norm was 3 % of the step); it
    also overflows on huge finite values (above ~1e19 in float32), so only then is the
    max-norm asked."""
    if not tensors:
        return torch.tensor(True)
    if tensors[0].device.type == "cpu":
        norm = torch.nn.utils.get_total_norm(tensors, norm_type=2.0)
        if norm.isfinite():
            return norm.isfinite()
    return torch.nn.utils.get_total_norm(tensors, norm_type=float("inf")).isfinite()


def describe_terms(metrics: dict) -> str:
    """This step's logged train/ values, the non-finite ones (the culprits) first."""
    terms = {
        k: float(v)
        for k, v in metrics.items()
        if k.startswith("train/") and not k.endswith("_epoch") and v.numel() == 1
    }
    order = sorted(terms, key=lambda k: (torch.isfinite(torch.tensor(terms[k])).item(), k))
    return ", ".join(f"{k}={terms[k]:.4g}" for k in order) or "no train/ values logged"
