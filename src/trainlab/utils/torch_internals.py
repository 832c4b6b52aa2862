"""Every private name of torch the project uses, in one place, with why no public route
serves. Checked on torch 2.11.0, 2.14.1 and 2.15.0; tests/test_library_internals.py fails
when one of them moves.

Where torch has a public route the project takes it (DTensor's ``to_local()``,
``flop_counter.register_flop_formula`` and ``sdpa_flop``); what stays here has none.
"""

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    apply_activation_checkpointing,  # FSDP's per-unit recompute; no public module holds it
)
from torch.nn.parallel import DistributedDataParallel

CHECKED_ON = ("2.11.0", "2.15.0")

# The CPU's fused attention kernels: FlopCounterMode counts the CUDA ones, not these.
CPU_FLASH_ATTENTION = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
CPU_FLASH_ATTENTION_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward

__all__ = [
    "CPU_FLASH_ATTENTION",
    "CPU_FLASH_ATTENTION_BACKWARD",
    "apply_activation_checkpointing",
    "clear_dynamo_counters",
    "is_compiled",
    "unique_graphs",
    "ddp_ignored_names",
    "ensure_recompile_limit",
    "lerp_all_",
    "maybe_mark_dynamic",
    "set_ddp_ignored_names",
    "inductor_config",
]


def maybe_mark_dynamic(x: torch.Tensor, dim: int) -> None:
    """Hint dynamo that ``x.shape[dim]`` changes between calls (torch.compiler has no public
    form of this hint; ``mark_dynamic`` would refuse a size that turns out static)."""
    torch._dynamo.maybe_mark_dynamic(x, dim)


def ensure_recompile_limit(at_least: int) -> None:
    """Raise dynamo's per-function graph limit (8 by default) to ``at_least``."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, at_least)


def unique_graphs() -> int:
    """How many graphs dynamo has compiled since the last reset (tests: no recompiles)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def clear_dynamo_counters() -> None:
    from torch._dynamo.utils import counters

    counters.clear()


def is_compiled(module: torch.nn.Module) -> bool:
    """Whether ``module.compile()`` was called on this module itself."""
    return module._compiled_call_impl is not None


def inductor_config():
    """``torch._inductor.config``: the flags compiler/regional.py sets per torch version."""
    import torch._inductor.config as config

    return config


def lerp_all_(targets: list[torch.Tensor], ends: list[torch.Tensor], weight: float) -> None:
    """``t.lerp_(e, weight)`` for every pair as one fused kernel per dtype and device: the
    foreach op that torch's own optimizers use (a Python loop is one kernel per tensor)."""
    torch._foreach_lerp_(targets, ends, weight)


def ddp_ignored_names(module: torch.nn.Module) -> set[str]:
    """The parameter and buffer names DDP leaves alone on ``module`` (no broadcast, no
    all-reduce); torch keeps them in a private attribute and sets them only wholesale."""
    return set(getattr(module, "_ddp_params_and_buffers_to_ignore", ()))


def set_ddp_ignored_names(module: torch.nn.Module, names: set[str]) -> None:
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(module, sorted(names))
