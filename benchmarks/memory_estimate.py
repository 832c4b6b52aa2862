"""The memory fit part's estimate (memory_fit/estimate.py) beside a measured peak on a CPU.

python -m benchmarks.memory_estimate   # writes benchmarks/memory_estimate.md
"""

from pathlib import Path

import torch

from trainlab.utils.seeding import step_generator


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
    """memory_fit/estimate.py's estimate beside the timeline's peak on this CPU, I-JEPA
    (ViT-Tiny of depth 4 at 32 px, the paper's masks), with and without checkpointing."""
    from functools import partial

    from benchmarks.model import make_ijepa
    from trainlab.memory_fit.estimate import estimate_peak
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

Written by `python -m benchmarks.memory_estimate` on {machine()}. I-JEPA, ViT-Tiny of depth 4 at
32 px (8 x 8 grid), predictor 2 x 96, the paper's masks, batch {batch}, float32. Estimated:
trainlab.memory_fit.estimate (what a run decides its fit from, before its run dir);
measured: the largest total of torch.profiler's memory timeline over each of {steps}
training steps (forward, backward, AdamW; the first creates AdamW's state).

| grad_checkpointing | estimated MiB | measured MiB, per step | estimated / largest measured |
|---|---|---|---|
{chr(10).join(rows)}
"""


if __name__ == "__main__":
    text = estimate_against_measured()
    (Path(__file__).parent / "memory_estimate.md").write_text(text)
    print(text)
