"""Multi-block masks: disjoint, bounded, edge-reaching, uncorrelated, reproducible, terminating."""

import numpy as np
import pytest
import torch

from trainlab.networks.multiblock_masks import MultiBlockMaskGenerator
from trainlab.utils.errors import ConfigError
from trainlab.utils.seeding import step_generator


def draws(gen, n, batch=16):
    return [gen(batch, step_generator(0, 0, i)) for i in range(n)]


def test_targets_never_overlap_the_context_and_counts_stay_in_bounds():
    gen = MultiBlockMaskGenerator(14)
    for masks in draws(gen, 50):
        B, M, T = masks.targets.shape
        assert M == 4 and masks.context.shape[0] == B
        assert gen.min_keep <= masks.context.shape[1] <= 196
        # scale 0.15-0.2 of 196 patches, aspect 0.75-1.5, after rounding to whole patches
        assert 0.1 * 196 <= T <= 0.26 * 196
        for b in range(B):
            ctx = set(masks.context[b].tolist())
            assert len(ctx) == masks.context.shape[1]  # no duplicates
            assert not ctx & set(masks.targets[b].flatten().tolist())


def test_every_position_including_last_row_and_column_is_reached():
    gen = MultiBlockMaskGenerator(14)
    seen_target, seen_context = (
        torch.zeros(196, dtype=torch.bool),
        torch.zeros(196, dtype=torch.bool),
    )
    for masks in draws(gen, 100):
        seen_target[masks.targets.flatten()] = True
        seen_context[masks.context.flatten()] = True
    assert seen_target.all() and seen_context.all()
    grid = seen_target.reshape(14, 14)
    assert grid[-1].all() and grid[:, -1].all()


class OneNumberBlocks(MultiBlockMaskGenerator):
    """The reference's flaw: scale and aspect drawn from one uniform number."""

    def _sample_size(self, g, scale, aspect):
        u = torch.rand((), generator=g).item()
        return self._block_size(
            scale[0] + (scale[1] - scale[0]) * u, aspect[0] + (aspect[1] - aspect[0]) * u
        )


def scale_aspect_correlation(gen: MultiBlockMaskGenerator) -> float:
    g = step_generator(0, 0, 0)
    sizes = [gen._sample_size(g, gen.target_scale, gen.target_aspect) for _ in range(3000)]
    scale = np.array([h * w for h, w in sizes], dtype=float)
    aspect = np.array([h / w for h, w in sizes], dtype=float)
    return float(np.corrcoef(scale, aspect)[0, 1])


def test_block_scale_and_aspect_are_uncorrelated():
    assert abs(scale_aspect_correlation(MultiBlockMaskGenerator(28))) < 0.1
    # The same measurement, through the same rounding to whole tokens, catches the flaw.
    assert scale_aspect_correlation(OneNumberBlocks(28)) > 0.5


def test_context_truncation_is_not_biased_to_the_top():
    gen = MultiBlockMaskGenerator(14)
    rows = torch.cat([(m.context // 14).flatten() for m in draws(gen, 50, batch=64)])
    # The reference keeps the first K in row-major order: its mean row sits well above 6.5.
    assert abs(rows.float().mean().item() - 6.5) < 0.5


def test_same_seed_epoch_step_gives_the_same_masks():
    gen = MultiBlockMaskGenerator(8, min_keep=4)
    a, b = gen(8, step_generator(3, 1, 7)), gen(8, step_generator(3, 1, 7))
    c = gen(8, step_generator(3, 1, 8))
    assert torch.equal(a.context, b.context) and torch.equal(a.targets, b.targets)
    assert not (a.context.shape == c.context.shape and torch.equal(a.context, c.context))


def test_terminates_where_the_reference_loops_forever():
    # 32 px, patch 4 (8x8 grid) with min_keep=10 hangs the reference for about half the seeds.
    gen = MultiBlockMaskGenerator(8, min_keep=10)
    for seed in range(200):
        masks = gen(32, step_generator(seed, 0, 0))
        assert masks.context.shape[1] >= 10


def test_impossible_settings_are_refused_up_front():
    with pytest.raises(ConfigError, match="min_keep"):
        MultiBlockMaskGenerator(4, min_keep=10)


def test_fixed_shapes_bound_the_token_counts_and_keep_targets_hidden():
    """fixed_shapes=n: one target count, at most n context counts, over many steps and grids;
    the tokens a subset drops from a target block stay out of the context too."""
    for grid, targets in ((14, 4), (8, 4), (4, 2)):
        free = MultiBlockMaskGenerator(grid, num_targets=targets, min_keep=2)
        fixed = MultiBlockMaskGenerator(grid, num_targets=targets, min_keep=2, fixed_shapes=4)
        shapes = set()
        for i in range(60):
            a, b = (gen(32, step_generator(0, 0, i)) for gen in (free, fixed))
            shapes.add((b.context.shape[1], b.targets.shape[2]))
            assert b.targets.shape[2] == fixed.target_tokens <= a.targets.shape[2]
            assert b.context.shape[1] <= a.context.shape[1]  # rounded down, never padded
            for s in range(32):  # each kept target token lies in the full block, unseen
                block = set(a.targets[s].flatten().tolist())
                assert set(b.targets[s].flatten().tolist()) <= block
                assert not set(b.context[s].tolist()) & block
        assert len(shapes) <= 4 and {k for k, _ in shapes} <= set(fixed.context_sizes)
    with pytest.raises(ConfigError, match="fixed_shapes"):
        MultiBlockMaskGenerator(14, fixed_shapes=0)
