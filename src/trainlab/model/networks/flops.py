"""Matmul FLOPs of ViT blocks, from a formula, so every run can report TFLOP/s and MFU.

torch.utils.flop_counter (and Lightning's measure_flops) count by running the model once
per shape; I-JEPA's context and target lengths change every step with the masks, so that
would be a counting pass per step. A block's FLOPs are a formula in its token count, which
tests/test_models.py checks against FlopCounterMode. Norms, softmax and GELU are left out,
as MFU is usually counted.
"""

import torch
from torch import nn
from torch.utils.flop_counter import flop_registry

# FlopCounterMode, which Lightning's model summary and measure_flops use, counts the CUDA
# fused-attention kernels but not the CPU's, so attention was missing from every CPU count.
# The CPU kernel takes the same (query, key, value, ...) arguments: give it the same formulas.
_aten = torch.ops.aten
flop_registry.setdefault(
    _aten._scaled_dot_product_flash_attention_for_cpu,
    flop_registry[_aten._scaled_dot_product_flash_attention],
)
flop_registry.setdefault(
    _aten._scaled_dot_product_flash_attention_for_cpu_backward,
    flop_registry[_aten._scaled_dot_product_flash_attention_backward],
)


def block_flops(tokens: int, dim: int, mlp_hidden: int) -> int:
    """Forward FLOPs of one ViT block on one sequence: the qkv, output projection and MLP
    matmuls (2 per multiply-add) and attention's two tokens x tokens products."""
    linear = 2 * tokens * dim * (3 * dim + dim + 2 * mlp_hidden)
    attention = 2 * 2 * tokens * tokens * dim
    return linear + attention


def blocks_flops(blocks: nn.ModuleList, tokens: int) -> int:
    """Forward FLOPs of a stack of timm ViT blocks on one sequence of ``tokens``."""
    return sum(
        block_flops(tokens, block.attn.qkv.in_features, block.mlp.fc1.out_features)
        for block in blocks
    )
