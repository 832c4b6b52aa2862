"""A printed estimate of a self-supervised run's peak memory per device, before its first step
(memory_fit/estimate.py), on the run's device under its precision."""

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

from trainlab.memory_fit.estimate import GIB, estimate_peak, random_batch
from trainlab.utils.logging import get_logger

log = get_logger(__name__)


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
        views = getattr(trainer.datamodule, "views", None)
        estimate = estimate_peak(
            pl_module,
            lambda n: random_batch(example.shape[1], example.shape[-1], views, n, pl_module.device),
            batch,
            trainer.precision_plugin.forward_context,
            self.probe_batches,
        )
        self.estimate = {
            "estimated_peak_gib": round(estimate.peak / GIB, 2),
            "estimated_activations_gib": round(estimate.activations / GIB, 2),
        }
        if not trainer.is_global_zero:
            return
        recompute = f", recomputed {estimate.recompute / GIB:.2f}" if estimate.recompute else ""
        log.info(
            f"peak memory per device, estimated: {self.estimate['estimated_peak_gib']} GiB "
            f"(weights {estimate.weights / GIB:.2f}, gradients and AdamW "
            f"{estimate.trained / GIB:.2f}, activations at batch {batch} "
            f"{estimate.activations / GIB:.2f}{recompute}; model.encoder.grad_checkpointing=true "
            "trades activations for compute)"
        )

    def summary(self) -> dict:
        return self.estimate or {}
