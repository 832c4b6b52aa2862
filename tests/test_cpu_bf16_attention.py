"""The CPU bf16 attention part: a bf16 run on a CPU (autocast, or FSDP's bf16 parameters)
switches every timm attention layer to its written-out path; float32 keeps the fused kernel."""

from types import SimpleNamespace

import hydra
import torch
from conftest import compose_cfg
from torch.distributed.fsdp import MixedPrecisionPolicy

from trainlab.callbacks.cpu_bf16_attention import CpuBf16Attention


def fused_flags(model):
    return [m.fused_attn for m in model.modules() if hasattr(m, "fused_attn")]


def trainer(precision: str, param_dtype=None):
    policy = MixedPrecisionPolicy(param_dtype=param_dtype)
    return SimpleNamespace(precision=precision, strategy=SimpleNamespace(mp_policy=policy))


def test_bf16_on_a_cpu_writes_attention_out_and_float32_keeps_it_fused(tmp_path):
    cfg = compose_cfg(tmp_path, ["model.encoder.depth=2"])  # the default job's ViT
    for bf16 in (trainer("bf16-mixed"), trainer("32-true", torch.bfloat16)):  # autocast, FSDP's
        model = hydra.utils.instantiate(cfg.model)
        assert len(fused_flags(model)) == 2 and all(fused_flags(model))  # one a block
        CpuBf16Attention().on_fit_start(trainer("32-true"), model)
        assert all(fused_flags(model))
        CpuBf16Attention().on_fit_start(bf16, model)
        assert not any(fused_flags(model))
