"""A self-supervised method's peak memory per device at a given batch, from two small steps.

weights (all parameters) + gradients and AdamW's two moments (trained parameters, float32)
+ the activations one step saves for its backward pass, counted with saved_tensors_hooks on
steps of 2 and 4 images (under the run's precision and activation checkpointing, each
storage once) and extrapolated to the batch. Two sizes, not one scaled: some saved tensors
do not grow with the batch (autocast saves a bf16 copy of every weight), and scaling a
2-image count by 64 put ViT-H/14 at 129 GiB where the H100 measured 46.5 (benchmarks/gpu.md).
With activation checkpointing, the backward pass recomputes one block at a time and holds
its activations, and as many bytes of their gradients, while it does: twice the activations
checkpointing stops saving, over the blocks it covers (a mean block). Against the peak
measured on a CPU (benchmarks/memory_estimate.md) it reads 1.07x with checkpointing (0.83x
with a block's activations counted once) and 1.14x without: above, as the probes' context
count, of 4 images, is above a larger batch's minimum. Allocator fragmentation and the forward's transient buffers are
left out: the fit decision keeps a margin for them (memory_fit/fit.py).
torch has no such estimate before a step.
"""

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace

import torch

from trainlab.model.saved_activations import saved_activation_bytes
from trainlab.networks.token_masks import Masks
from trainlab.utils import lightning_internals
from trainlab.utils.seeding import step_generator

GIB = 2**30


def random_batch(channels: int, size: int, views, n: int, device="cpu"):
    """n random images shaped like a training batch: a list of views where the data has
    views (data.views, each view's own size)."""
    sizes = [v.get("size", size) for v in views] if views else [size]
    images = [torch.randn(n, channels, s, s, device=device) for s in sizes]
    return images if views else images[0]


def checkpointed_blocks(model: torch.nn.Module) -> int:
    """How many blocks run under activation checkpointing in a training step (the networks
    with ``grad_checkpointing`` on, and trained: a target encoder runs without gradients)."""
    return sum(
        len(m.blocks)
        for m in model.modules()
        if getattr(m, "grad_checkpointing", False)
        and hasattr(m, "blocks")
        and any(p.requires_grad for p in m.parameters())
    )


def set_checkpointing(model: torch.nn.Module, on: bool | dict) -> dict:
    """Activation checkpointing on or off in every network that has the switch (``on`` a
    dict: each module's own, as returned); returns each module's setting before."""
    before = {}
    for module in model.modules():
        if hasattr(module, "grad_checkpointing"):
            before[module] = module.grad_checkpointing
            module.grad_checkpointing = on[module] if isinstance(on, dict) else on
    return before


@dataclass
class PeakEstimate:
    """Bytes per device; activations and recompute grow by their ``_per_image`` with the batch."""

    weights: int
    trained: int  # gradients and AdamW's two moments
    activations: float  # saved for backward, at ``batch``
    recompute: float  # one block's activations, recomputed by checkpointing in backward
    batch: int
    activations_per_image: float = 0.0
    recompute_per_image: float = 0.0

    @property
    def peak(self) -> float:
        return self.weights + self.trained + self.activations + self.recompute

    def at(self, batch: int) -> "PeakEstimate":
        """The same model and step at another batch."""
        more = batch - self.batch
        return replace(
            self,
            activations=self.activations + self.activations_per_image * more,
            recompute=self.recompute + self.recompute_per_image * more,
            batch=batch,
        )


def estimate_peak(
    model,
    inputs: Callable[[int], object],
    batch: int,
    precision: Callable[[], AbstractContextManager] = nullcontext,
    probe_batches: tuple[int, int] = (2, 4),
) -> PeakEstimate:
    """The peak per device at ``batch`` images a step; ``inputs(n)``: a batch of n random
    images shaped as training batches (a list of views where the data has views);
    ``precision()``: the run's autocast. The probes leave the model as they found it: its
    buffers (a centre, a queue, BatchNorm's statistics) and every random stream."""
    params = list(model.parameters())
    weights = sum(p.numel() * p.element_size() for p in params)
    trained = sum(p.numel() for p in params if p.requires_grad) * 4 * 3  # grad, 2 moments
    device = params[0].device
    # Outside the run's logging (a step's log_numbers reads the trainer).
    attached = lightning_internals.detach_trainer(model)
    state = {name: b.detach().clone() for name, b in model.named_buffers()}
    blocks = checkpointed_blocks(model)

    def activations(n: int) -> int:
        with precision():
            return saved_activation_bytes(model, inputs(n))

    a, b = probe_batches
    draws = getattr(model, "masks", None)
    if callable(draws):  # I-JEPA's and MAE's masks, drawn per batch
        # One draw serves both probes: the batch's context count is the minimum over its
        # samples, so a larger batch draws a smaller one, and two draws would fold that fall
        # into the per-image growth (ViT-H/14 read 32.1 GiB where an H200 measured 51.2).
        # The probes' count, of 4 images, is above what a larger batch's minimum keeps.
        drawn = draws(b, step_generator(0, 0, 0))
        model.masks = lambda n, generator: Masks(drawn.context[:n], drawn.targets[:n])
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            saved = activations(a), activations(b)
            whole = saved
            if blocks:  # the same steps without checkpointing: what it stops saving
                before = set_checkpointing(model, False)
                try:
                    whole = activations(a), activations(b)
                finally:
                    set_checkpointing(model, before)
    finally:
        if callable(draws):
            model.masks = draws
        lightning_internals.attach_trainer(model, attached)
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(state[name])
    recompute = [
        2 * max(w - s, 0) / blocks if blocks else 0.0 for w, s in zip(whole, saved, strict=True)
    ]
    probe = PeakEstimate(
        weights, trained, saved[0], recompute[0], a,
        activations_per_image=(saved[1] - saved[0]) / (b - a),
        recompute_per_image=(recompute[1] - recompute[0]) / (b - a),
    )  # fmt: skip
    return probe.at(batch)
