"""Matmul FLOPs of ViT blocks and conv FLOPs of patch embeddings, from formulas, so every run
can report TFLOP/s and MFU.

torch.utils.flop_counter (and Lightning's measure_flops) count by running the model once
per shape; I-JEPA's context and target lengths change every step with the masks, so that
would be a counting pass per step. A block's FLOPs are a formula in its token count, and so
are the patch embedding's per token; tests/test_ijepa.py checks both against
FlopCounterMode. Norms, softmax and GELU are left out, as MFU is usually counted.
"""

from torch import nn
from torch.utils.flop_counter import register_flop_formula, sdpa_backward_flop, sdpa_flop

from trainlab.utils import torch_internals

# FlopCounterMode, which Lightning's model summary and measure_flops use, counts the CUDA
# fused-attention kernels; torch before 2.15 does not count the CPU's, so attention was
# missing from every CPU count there. The CPU kernel takes the same (query, key, value, ...)
# arguments: give it the same formulas (already shape-wrapped, hence get_raw).
for _op, _formula in (
    (torch_internals.CPU_FLASH_ATTENTION, sdpa_flop),
    (torch_internals.CPU_FLASH_ATTENTION_BACKWARD, sdpa_backward_flop),
):
    try:
        register_flop_formula(_op, get_raw=True)(_formula)
    except RuntimeError:  # "duplicate registrations": torch 2.15 counts it itself
        pass


def block_flops(tokens: int, dim: int, mlp_hidden: int, queries: int | None = None) -> int:
    """Forward FLOPs of one ViT block on one sequence: the qkv, output projection and MLP
    matmuls (2 per multiply-add) and attention's two queries x tokens products. ``queries``:
    the rows whose output is computed (all ``tokens`` unless given; keys and values see all)."""
    queries = tokens if queries is None else queries
    linear = 2 * tokens * dim * 2 * dim + 2 * queries * dim * (dim + dim + 2 * mlp_hidden)
    attention = 2 * 2 * queries * tokens * dim
    return linear + attention


def blocks_flops(blocks: nn.ModuleList, tokens: int, last_queries: int | None = None) -> int:
    """Forward FLOPs of a stack of timm ViT blocks on one sequence of ``tokens``; the last
    block computes only ``last_queries`` rows if given (the I-JEPA predictor's)."""
    return sum(
        block_flops(
            tokens,
            block.attn.qkv.in_features,
            block.mlp.fc1.out_features,
            last_queries if i == len(blocks) - 1 else None,
        )
        for i, block in enumerate(blocks)
    )


def patch_embed_flops(embed: nn.Module) -> int:
    """Forward FLOPs per token of a timm patch embedding: each Conv2d in it as a convolution
    inside one patch (timm's linear embedding is one, patch_stem.py's CNN stem three; the stem
    runs its convs as dense matrices on small patches, which do more FLOPs than the model
    needs, and those are not counted)."""
    ph, pw = embed.patch_size
    total = 0
    for conv in embed.modules():
        if isinstance(conv, nn.Conv2d):
            kh, kw = conv.kernel_size
            positions = (ph // conv.stride[0]) * (pw // conv.stride[1])
            total += 2 * conv.in_channels * conv.out_channels * kh * kw * positions // conv.groups
    return total
