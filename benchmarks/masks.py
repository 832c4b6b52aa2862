"""Mask generation: the vectorised generator against a per-sample loop of the reference algorithm.

The loop below re-implements the reference collator's algorithm (per sample, per block,
rejection sampling in Python) for timing only; it is not used for training.
"""

import math
import statistics
import time

import torch

from trainlab.networks.multiblock_masks import MultiBlockMaskGenerator
from trainlab.utils.seeding import step_generator


def reference_loop(
    batch_size,
    H,
    W,
    g,
    num_targets=4,
    target_scale=(0.15, 0.2),
    target_aspect=(0.75, 1.5),
    context_scale=(0.85, 1.0),
    min_keep=10,
):
    """Per-sample Python loop in the style of the reference collator (its flaws kept)."""

    def block_size(scale, aspect):
        u = torch.rand(1, generator=g).item()  # one number for both: the reference's coupling
        s = scale[0] + u * (scale[1] - scale[0])
        a = aspect[0] + u * (aspect[1] - aspect[0])
        h, w = int(round(math.sqrt(s * H * W * a))), int(round(math.sqrt(s * H * W / a)))
        return min(h, H - 1), min(w, W - 1)

    def sample_block(h, w, acceptable=None):
        for _ in range(1000):
            top = torch.randint(0, H - h, (1,), generator=g).item()
            left = torch.randint(0, W - w, (1,), generator=g).item()
            mask = torch.zeros(H, W, dtype=torch.int32)
            mask[top : top + h, left : left + w] = 1
            if acceptable is not None:
                for region in acceptable:
                    mask *= region
            idx = torch.nonzero(mask.flatten()).squeeze()
            if idx.numel() > min_keep:
                return idx, 1 - mask
        return idx, 1 - mask

    ph, pw = block_size(target_scale, target_aspect)
    eh, ew = block_size(context_scale, (1.0, 1.0))
    contexts, targets = [], []
    for _ in range(batch_size):
        regions, tgt = [], []
        for _ in range(num_targets):
            idx, complement = sample_block(ph, pw)
            tgt.append(idx)
            regions.append(complement)
        ctx, _ = sample_block(eh, ew, regions)
        contexts.append(ctx)
        targets.append(tgt)
    keep = min(len(c) for c in contexts)
    return [c[:keep] for c in contexts], targets


def bench(batch_size=64, grid=14, repeats=7, steps=20) -> dict:
    gen = MultiBlockMaskGenerator(grid, min_keep=4)
    vec, loop = [], []
    for r in range(repeats):
        start = time.perf_counter()
        for s in range(steps):
            gen(batch_size, step_generator(r, 0, s))
        vec.append((time.perf_counter() - start) / steps)
        start = time.perf_counter()
        for s in range(steps):
            reference_loop(batch_size, grid, grid, step_generator(r, 0, s), min_keep=4)
        loop.append((time.perf_counter() - start) / steps)
    v, l_ = statistics.median(vec), statistics.median(loop)
    return {
        "batch": batch_size,
        "grid": f"{grid}x{grid}",
        "vectorised_ms": v * 1e3,
        "loop_ms": l_ * 1e3,
        "speedup": l_ / v,
    }


if __name__ == "__main__":
    print(bench())
