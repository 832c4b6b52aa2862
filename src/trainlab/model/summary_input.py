"""The blank image Lightning's model summary runs forward on, for its FLOPs column: without
one, the summary of every run says "Total FLOPs: 0"."""

import torch
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy


def summary_input(trainer) -> torch.Tensor | None:
    """One (1, C, H, W) image of zeros shaped as the data module's images (the evaluation
    forward, per image; the throughput part counts steps'). None without such a data module,
    and under FSDP, where the summary's forward meets sharded parameters next to plain tensors
    and fails (FSDP2: "mixed torch.Tensor and DTensor")."""
    datamodule = trainer.datamodule
    if datamodule is None or not hasattr(datamodule, "image_size"):
        return None
    if isinstance(trainer.strategy, (ModelParallelStrategy, FSDPStrategy)):
        return None
    size = datamodule.image_size
    return torch.zeros(1, datamodule.in_chans, size, size)
