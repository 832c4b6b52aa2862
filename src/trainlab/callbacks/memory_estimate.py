"""A printed estimate of a self-supervised run's peak memory per device, before its first step.

weights (all parameters) + gradients and AdamW's two moments (trained parameters, float32)
+ the activations one step saves for its backward pass, counted with saved_tensors_hooks on
steps of 2 and 4 images (under the run's precision and activation checkpointing, each
storage once) and extrapolated to the per-device batch. Two sizes, not one scaled: some
saved tensors do not grow with the batch (autocast saves a bf16 copy of every weight), and
scaling a 2-image count by 64 put ViT-H/14 at 129 GiB where the H100 measured 46.5
(benchmarks/gpu.md). It leaves out allocator fragmentation, the forward's transient buffers
and what activation checkpointing recomputes in the backward pass. torch has no such
estimate before a step.
"""

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

from trainlab.networks.masks import step_generator
from trainlab.utils.logging import get_logger

log = get_logger(__name__)
GIB = 2**30


def saved_activation_bytes(module, images: torch.Tensor) -> int:
    """Bytes of the tensors one eager ``module.loss`` saves for backward (each storage once;
    the module's own parameters, which it saves by reference, not counted)."""
    seen = {
        (p.untyped_storage().data_ptr(), p.untyped_storage().nbytes()) for p in module.parameters()
    }
    total = 0

    def pack(t):
        nonlocal total
        storage = t.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if key not in seen:
            seen.add(key)
            total += key[1]
        return t

    # Eager also under compile=true (force_eager: torch.compiler.disable leaves explicitly
    # compiled networks compiled): traced, these hooks recompiled 18 times on an H100, 2
    # minutes before the first step, and the probe's batch sizes would add graphs of their own.
    with torch.compiler.set_stance("force_eager"):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module.loss(images, step_generator(0, 0, 0))
    return total


class MemoryEstimate(Callback):
    def __init__(self, probe_batches: tuple[int, int] = (2, 4)):
        self.probe_batches = probe_batches
        self.estimate: dict | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        sharded = isinstance(trainer.strategy, (FSDPStrategy, ModelParallelStrategy))
        # Every rank probes (a method may gather over ranks in its loss: VICReg); rank 0 prints.
        if sharded or not hasattr(pl_module, "loss"):
            return
        example = pl_module.example_input_array
        if example is None or trainer.datamodule is None:
            return
        batch = trainer.datamodule.batch_size
        params = list(pl_module.parameters())
        weights = sum(p.numel() * p.element_size() for p in params)
        trained = sum(p.numel() for p in params if p.requires_grad) * 4 * 3  # grad, 2 moments
        # Outside the run's random streams and its logging (a step's log_numbers reads
        # the trainer): the run draws exactly what it would without the estimate.
        attached, pl_module._trainer = pl_module._trainer, None
        cuda = pl_module.device.type == "cuda"
        # A method's loss may move its own state (DINO's centre, a queue, BatchNorm's
        # statistics): the probes run on it and it is put back, so a run starts, and resumes,
        # from exactly the state it would have without the estimate.
        state = {name: b.detach().clone() for name, b in pl_module.named_buffers()}
        try:
            with torch.random.fork_rng(devices=[pl_module.device] if cuda else []):
                with trainer.precision_plugin.forward_context():
                    small, large = (
                        saved_activation_bytes(
                            pl_module, self._inputs(trainer, example, n, pl_module.device)
                        )
                        for n in self.probe_batches
                    )
        finally:
            pl_module._trainer = attached
            with torch.no_grad():
                for name, buffer in pl_module.named_buffers():
                    buffer.copy_(state[name])
        (a, b) = self.probe_batches
        per_image = (large - small) / (b - a)
        activations = small + per_image * (batch - a)
        self.estimate = {
            "estimated_peak_gib": round((weights + trained + activations) / GIB, 2),
            "estimated_activations_gib": round(activations / GIB, 2),
        }
        if not trainer.is_global_zero:
            return
        log.info(
            f"peak memory per device, estimated: {self.estimate['estimated_peak_gib']} GiB "
            f"(weights {weights / GIB:.2f}, gradients and AdamW {trained / GIB:.2f}, "
            f"activations at batch {batch} {activations / GIB:.2f}; "
            "model.encoder.grad_checkpointing=true trades activations for compute)"
        )

    @staticmethod
    def _inputs(trainer, example: torch.Tensor, n: int, device: torch.device):
        """n random images shaped like the training batches: a list of views with data.views."""
        channels, size = example.shape[1], example.shape[-1]
        views = getattr(trainer.datamodule, "views", None)
        sizes = [v.get("size", size) for v in views] if views else [size]
        images = [torch.randn(n, channels, s, s, device=device) for s in sizes]
        return images if views else images[0]

    def summary(self) -> dict:
        return self.estimate or {}
