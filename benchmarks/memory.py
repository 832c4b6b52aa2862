"""Activation memory of an I-JEPA training step with and without activation checkpointing.

On CUDA: peak allocated memory (torch.cuda.max_memory_allocated) over a training step.
On CPU there is no allocator counter, so the number is the bytes of tensors autograd saves
for the backward pass (counted with saved_tensors_hooks, each storage once): exactly the
memory that activation checkpointing trades for recomputation.
"""

import torch

from trainlab.model.saved_activations import saved_activation_bytes
from trainlab.utils.seeding import step_generator


def saved_activation_mib(model, images) -> float:
    return saved_activation_bytes(model, images) / 2**20


def cuda_peak_mib(model, images) -> float:
    torch.cuda.reset_peak_memory_stats()
    loss, _ = model.loss(images, step_generator(0, 0, 0))
    loss.backward()
    return torch.cuda.max_memory_allocated() / 2**20


def bench(make_model, images) -> dict:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    measure = cuda_peak_mib if device == "cuda" else saved_activation_mib
    results = {}
    for name, ckpt in (("plain", False), ("checkpointed", True)):
        model = make_model(grad_checkpointing=ckpt).to(device).train()
        results[name] = measure(model, images.to(device))
    what = "peak allocated MiB" if device == "cuda" else "MiB saved for backward"
    return {
        "device": device,
        "what": what,
        "plain_mib": results["plain"],
        "checkpointed_mib": results["checkpointed"],
        "ratio": results["checkpointed"] / results["plain"],
    }
