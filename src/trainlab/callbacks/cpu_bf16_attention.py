"""Attention written out (softmax(q k^T) v) instead of torch's fused kernel when a run trains
in bf16 on a CPU: bf16 autocast, or FSDP's bf16 parameters (``strategy.param_dtype``).

torch 2.14's CPU flash-attention backward is slow in bf16: 18.5 ms a call against 1.9 ms in
float32, 41 % of an I-JEPA step (ViT-Tiny/4, 64 tokens, batch 64, on a 2-core Xeon with
AMX). timm's written-out path runs the same products as bf16 matmuls, and the step then goes
1.7x as fast (benchmarks/ijepa.md). GPUs keep the fused kernel; so does float32 on a CPU, where
the two paths are level. Every timm ``Attention`` has the switch, so this covers the
encoders, the predictor and the classifier alike.
"""

import lightning as L
import torch

from trainlab.utils.logging import get_logger

log = get_logger(__name__)


def write_attention_out(model: torch.nn.Module) -> int:
    """Switch every timm attention layer of ``model`` to its written-out path; how many."""
    switched = [m for m in model.modules() if getattr(m, "fused_attn", False)]
    for module in switched:
        module.fused_attn = False
    return len(switched)


class CpuBf16Attention(L.Callback):
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        policy = getattr(trainer.strategy, "mp_policy", None)  # FSDP's mixed precision
        bf16 = str(trainer.precision).startswith("bf16") or (
            getattr(policy, "param_dtype", None) == torch.bfloat16
        )
        if pl_module.device.type != "cpu" or not bf16:
            return
        if switched := write_attention_out(pl_module):
            log.info(f"bf16 on a CPU: {switched} attention layers run written out, not fused")
