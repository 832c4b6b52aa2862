"""Which tokens a masked method's encoder sees (the context) and which it predicts (the target
blocks): the container that I-JEPA's multi-block masks and MAE's random masks both return."""

from dataclasses import dataclass

import torch


@dataclass
class Masks:
    context: torch.Tensor  # (B, K) token indices, sorted, the same K for the whole batch
    targets: torch.Tensor  # (B, M, T) token indices of each target block, row-major

    def to(self, device: torch.device) -> "Masks":
        """Both index tensors on ``device``. Drawn on the CPU, they reach a GPU through pinned
        memory without blocking: a pageable host-to-device copy waits for every kernel queued
        so far, a host sync per step."""
        if torch.device(device).type != "cuda":
            return Masks(self.context.to(device), self.targets.to(device))
        return Masks(
            self.context.pin_memory().to(device, non_blocking=True),
            self.targets.pin_memory().to(device, non_blocking=True),
        )
