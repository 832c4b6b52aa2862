"""I-JEPA's multi-block masks: one large context block, M small target blocks.

Drawn vectorised for a whole batch from a generator seeded by (seed, epoch, step), so a
step's masks are the same whatever the number of dataloader workers or ranks, and are
reproduced exactly on resume. They are drawn in the training step, not in the dataloader
collate, since a collate function cannot know the global step.

Three flaws of the reference collator are fixed here:
1. block scale and aspect ratio are drawn independently (the reference uses one number);
2. a block's corner is drawn from [0, H - h] inclusive, so blocks reach the last row and
   column (the reference's randint(0, H - h) never does);
3. contexts are equalised to the batch minimum by dropping a random subset of each
   context's patches (the reference keeps the first K in row-major order, a top bias).
And it always terminates: impossible settings are refused up front; targets that leave
fewer than min_keep patches, and contexts that keep too few, are redrawn a bounded number
of times; a context still short then falls back to the whole grid minus the targets.

``fixed_shapes=n`` bounds the step's tensor shapes: every target block keeps a random subset
of T tokens (T: the smallest block the scale and aspect ranges give), and the context's K
is rounded down to one of n counts, so a step has at most n shapes. Less work per step and
another objective than the paper's (docs/scaling.md); off by default: compile=true serves
every count of the paper's masks with one graph.
"""

import math

import torch

from trainlab.networks.token_masks import Masks
from trainlab.utils.errors import ConfigError
from trainlab.utils.ranges import Bounds, Count


class MultiBlockMaskGenerator:
    def __init__(
        self,
        grid: tuple[int, int] | int,
        num_targets: Count = 4,
        target_scale: Bounds = (0.15, 0.2),
        target_aspect: Bounds = (0.75, 1.5),
        context_scale: Bounds = (0.85, 1.0),
        context_aspect: Bounds = (1.0, 1.0),
        min_keep: Count = 10,
        max_tries: Count = 20,
        fixed_shapes: Count | None = None,
    ):
        self.H, self.W = (grid, grid) if isinstance(grid, int) else tuple(grid)
        self.N = self.H * self.W
        self.num_targets, self.min_keep, self.max_tries = num_targets, min_keep, max_tries
        self.target_scale, self.target_aspect = tuple(target_scale), tuple(target_aspect)
        self.context_scale, self.context_aspect = tuple(context_scale), tuple(context_aspect)
        self._check()
        self.fixed_shapes = fixed_shapes
        if fixed_shapes is not None:
            if fixed_shapes < 1:
                raise ConfigError(f"masks fixed_shapes={fixed_shapes}: give n >= 1, or null")
            self.target_tokens = self._smallest_target()
            # Spaced geometrically: rounding a batch's K down then loses at most the same
            # fraction of it at every size (a third at n=8 on a 14x14 grid; 0 at K = a count).
            # Plain floats, not torch: the model may be built on the meta device.
            low, ratio = max(min_keep, 1), (self.N - self.target_tokens) / max(min_keep, 1)
            counts = {
                math.floor(low * ratio ** (i / max(fixed_shapes - 1, 1)) + 1e-9)
                for i in range(fixed_shapes)
            }
            self.context_sizes = sorted(counts)

    def _smallest_target(self) -> int:
        """The fewest patches a target block can have: the smallest h * w over a fine grid of
        the scale and aspect ranges (ends included), after rounding to whole patches."""
        steps = [i / 200 for i in range(201)]
        (s0, s1), (a0, a1) = self.target_scale, self.target_aspect
        sizes = (
            self._block_size(s0 + (s1 - s0) * t, a0 + (a1 - a0) * u) for t in steps for u in steps
        )
        return min(h * w for h, w in sizes)

    def _block_size(self, scale: float, aspect: float) -> tuple[int, int]:
        h = round(math.sqrt(scale * self.N * aspect))
        w = round(math.sqrt(scale * self.N / aspect))
        return min(max(h, 1), self.H), min(max(w, 1), self.W)

    def _check(self) -> None:
        """Refuse settings whose targets, at their nominal largest area, leave fewer than
        min_keep context patches. Rounding to whole patches can make a block a little
        larger than nominal; the rare batch where that matters is redrawn in __call__."""
        worst_target = math.ceil(self.target_scale[1] * self.N)
        left = self.N - self.num_targets * worst_target
        if left < self.min_keep:
            raise ConfigError(
                f"masks cannot keep min_keep={self.min_keep} context patches on a "
                f"{self.H}x{self.W} grid: {self.num_targets} targets of up to {worst_target} "
                f"patches may leave only {left}; lower min_keep, num_targets or target_scale"
            )

    def _sample_size(self, g, scale, aspect) -> tuple[int, int]:
        s = scale[0] + (scale[1] - scale[0]) * torch.rand((), generator=g).item()
        a = aspect[0] + (aspect[1] - aspect[0]) * torch.rand((), generator=g).item()  # independent
        return self._block_size(s, a)

    def _corners(self, g, shape, h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-left corners of h x w blocks, uniform over [0, H - h] x [0, W - w], edges included."""
        top = torch.randint(0, self.H - h + 1, shape, generator=g)
        left = torch.randint(0, self.W - w + 1, shape, generator=g)
        return top, left

    def _indices(self, top, left, h: int, w: int) -> torch.Tensor:
        """Row-major token indices of each block: (*shape, h * w), computed, not searched."""
        rows = top[..., None, None] + torch.arange(h)[:, None]
        cols = left[..., None, None] + torch.arange(w)[None, :]
        return (rows * self.W + cols).flatten(-2)

    def _blocks(self, g, shape, h: int, w: int) -> torch.Tensor:
        """Boolean (*shape, N) masks of h x w blocks at uniform positions."""
        top, left = self._corners(g, shape, h, w)
        mask = torch.zeros(*shape, self.N, dtype=torch.bool)
        return mask.scatter_(-1, self._indices(top, left, h, w), True)

    def _union(self, target_idx: torch.Tensor) -> torch.Tensor:
        """(B, N) boolean: the patches covered by any target block of each sample."""
        covered = torch.zeros(target_idx.shape[0], self.N, dtype=torch.bool)
        return covered.scatter_(1, target_idx.reshape(target_idx.shape[0], -1), True)

    def __call__(self, batch_size: int, generator: torch.Generator) -> Masks:
        g, B, M = generator, batch_size, self.num_targets
        th, tw = self._sample_size(g, self.target_scale, self.target_aspect)
        ch, cw = self._sample_size(g, self.context_scale, self.context_aspect)
        target_idx = self._indices(*self._corners(g, (B, M), th, tw), th, tw)  # (B, M, T)
        covered = self._union(target_idx)
        for _ in range(self.max_tries):  # targets that leave too little room: redraw them
            crowded = (~covered).sum(1) < self.min_keep
            if not crowded.any():
                break
            n = int(crowded.sum())
            target_idx[crowded] = self._indices(*self._corners(g, (n, M), th, tw), th, tw)
            covered = self._union(target_idx)
        context = self._blocks(g, (B,), ch, cw) & ~covered
        for _ in range(self.max_tries):
            short = context.sum(1) < self.min_keep
            if not short.any():
                break
            context[short] = self._blocks(g, (int(short.sum()),), ch, cw) & ~covered[short]
        else:  # still short after max_tries: the whole grid minus the targets
            short = context.sum(1) < self.min_keep
            context[short] = ~covered[short]
        # Equalise context lengths: keep a random K-subset of each context (K = batch minimum),
        # the K smallest of random scores; nonzero returns them already sorted.
        keep = int(context.sum(1).min())
        if self.fixed_shapes is not None:  # the largest allowed count the batch can fill
            keep = max((k for k in self.context_sizes if k <= keep), default=keep)
        if keep == 0:  # needs max_tries failed redraws in a row: not seen at any valid setting
            raise RuntimeError("mask generation left a sample without context; raise max_tries")
        # float64: a tie at the K-th score (which would keep K+1) is then practically impossible.
        scores = torch.rand(B, self.N, generator=g, dtype=torch.float64).masked_fill_(~context, 2.0)
        kth = scores.kthvalue(keep, dim=1, keepdim=True).values
        context_idx = (scores <= kth).nonzero()[:, 1].reshape(B, keep)
        if self.fixed_shapes is not None:  # after the context: dropped target tokens stay hidden
            target_idx = self._keep_random(target_idx, self.target_tokens, g)
        return Masks(context=context_idx, targets=target_idx)

    @staticmethod
    def _keep_random(idx: torch.Tensor, k: int, g: torch.Generator) -> torch.Tensor:
        """A random k-subset of the last axis of ``idx``, kept in row-major order."""
        if k >= idx.shape[-1]:
            return idx
        scores = torch.rand(idx.shape, generator=g)
        chosen = scores.topk(k, dim=-1, largest=False).indices.sort(dim=-1).values
        return idx.gather(-1, chosen)
