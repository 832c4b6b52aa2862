"""Activation memory of an I-JEPA training step with and without activation checkpointing.

On CUDA: peak allocated memory (torch.cuda.max_memory_allocated) over a training step.
On CPU there is no allocator counter, so the number is the bytes of tensors autograd saves
for the backward pass (counted with saved_tensors_hooks, each storage once): exactly the
memory that activation checkpointing trades for recomputation.
"""

import torch

from trainlab.model.memory_estimate import saved_activation_bytes
from trainlab.networks.masks import step_generator


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


def timeline_peak_mib(model, optimizer, images, step: int) -> float:
    """The largest total of the profiler's CPU memory timeline over one training step
    (forward, backward, AdamW): what a CPU has in place of the CUDA allocator's peak."""
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    options = dict(profile_memory=True, record_shapes=True, with_stack=True)
    with profile(activities=[ProfilerActivity.CPU], **options) as prof:
        loss, _ = model.loss(images, step_generator(0, 0, step))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/timeline.json"
        prof.export_memory_timeline(path, device="cpu")
        _, sizes = json.load(open(path))
    return max(sum(row) for row in sizes) / 2**20


def estimate_against_measured(steps: int = 3, batch: int = 64) -> str:
    """model/memory_estimate.py's estimate beside the timeline's peak on this CPU, I-JEPA
    (ViT-Tiny of depth 4 at 32 px, the paper's masks), with and without checkpointing."""
    from functools import partial

    from benchmarks.model import make_ijepa
    from trainlab.model.memory_estimate import estimate_peak
    from trainlab.utils.machine import machine

    encoder = dict(img_size=32, patch_size=4, in_chans=1, size="vit_tiny", depth=4)
    rows = []
    for checkpointing in (False, True):
        model = partial(make_ijepa, encoder, (96, 2, 4), 4, checkpointing)()
        optimizer = model.configure_optimizers()
        estimate = estimate_peak(model, lambda n: torch.randn(n, 1, 32, 32), batch)
        images = torch.randn(batch, 1, 32, 32)
        peaks = [timeline_peak_mib(model, optimizer, images, s) for s in range(steps)]
        rows.append(
            f"| {checkpointing} | {estimate.peak / 2**20:.0f} | "
            f"{', '.join(f'{p:.0f}' for p in peaks)} | {estimate.peak / 2**20 / max(peaks):.2f} |"
        )
    return f"""# The memory estimate against a measured peak, on a CPU

Written by `python -m benchmarks.memory` on {machine()}. I-JEPA, ViT-Tiny of depth 4 at
32 px (8 x 8 grid), predictor 2 x 96, the paper's masks, batch {batch}, float32. Estimated:
trainlab.model.memory_estimate (what a run decides its fit from, before its run dir);
measured: the largest total of torch.profiler's memory timeline over each of {steps}
training steps (forward, backward, AdamW; the first creates AdamW's state).

| grad_checkpointing | estimated MiB | measured MiB, per step | estimated / largest measured |
|---|---|---|---|
{chr(10).join(rows)}
"""


if __name__ == "__main__":
    from pathlib import Path

    text = estimate_against_measured()
    (Path(__file__).parent / "memory_estimate.md").write_text(text)
    print(text)
