"""FSDP2 checks inside one 2-process gloo job, so start-up is paid once.

``python tests/fsdp_harness.py OUT_DIR``: as tests/ddp_harness.py, whose models and helpers
it uses; each rank writes what it saw to OUT_DIR/rank<N>.json; tests/test_fsdp.py asserts
on it.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from ddp_harness import Regression, loader, max_diff, params, trainer, write_report

from trainlab.strategy.ddp import DDPStrategy
from trainlab.strategy.fsdp import FSDPStrategy


def main(out: Path) -> None:
    report = {}
    # 1. FSDP2 (sharded) trains the same as DDP (replicated), step for step.
    results = {}
    for name, strategy in [
        ("ddp", DDPStrategy()),
        ("fsdp", FSDPStrategy(shard_modules=["timm.models.vision_transformer.Block"])),
        (
            "fsdp_checkpointed",
            FSDPStrategy(
                shard_modules=["timm.models.vision_transformer.Block"],
                activation_checkpointing=True,
                reshard_after_forward=False,
            ),
        ),
    ]:
        model = Regression(transformer=True, seed=3)
        trainer(strategy, max_steps=3).fit(model, loader(4))
        results[name] = params(model)
        report[f"{name}_losses"] = model.losses
    report["fsdp_vs_ddp_diff"] = max_diff(results["ddp"], results["fsdp"])
    # Sharded for real: this rank holds about half of each block's parameters.
    local = [p.to_local().numel() for p in model.parameters() if hasattr(p, "to_local")]
    full = [p.numel() for p in model.parameters() if hasattr(p, "to_local")]
    report["fsdp_checkpointed_local_fraction"] = sum(local) / sum(full) if full else 1.0

    # 2. FSDP's mixed precision takes effect: blocks compute in param_dtype, gradients are
    # reduce-scattered in reduce_dtype (recorded where torch.distributed is called).
    model = Regression(transformer=True, seed=3)
    compute_dtypes, scattered_dtypes = set(), set()
    model.block.attn.register_forward_pre_hook(
        lambda module, args: compute_dtypes.add(str(module.qkv.weight.dtype))
    )
    # what FSDP2 calls for the gradients (torch 2.14 renamed reduce_scatter_tensor)
    SCATTER = (
        "reduce_scatter_single"
        if hasattr(dist, "reduce_scatter_single")
        else "reduce_scatter_tensor"
    )
    reduce_scatter = getattr(dist, SCATTER)

    def recording_reduce_scatter(*args, **kwargs):
        scattered_dtypes.add(str(kwargs.get("input", args[1] if len(args) > 1 else None).dtype))
        return reduce_scatter(*args, **kwargs)

    setattr(dist, SCATTER, recording_reduce_scatter)
    strategy = FSDPStrategy(
        shard_modules=["timm.models.vision_transformer.Block"],
        param_dtype="bfloat16",
        reduce_dtype="float32",
    )
    try:
        trainer(strategy, max_steps=3).fit(model, loader(4))
    except RuntimeError as error:  # seen on torch 2.11 (gloo, CPU): recorded, not hidden
        if tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 14):
            raise
        report["fsdp_bf16_error"] = str(error).splitlines()[0]
    setattr(dist, SCATTER, reduce_scatter)
    report["fsdp_bf16_compute_dtypes"] = sorted(compute_dtypes)
    report["fsdp_bf16_scattered_dtypes"] = sorted(scattered_dtypes)
    report["fsdp_bf16_losses"] = model.losses
    report["fsdp_checkpointed_vs_ddp_diff"] = max_diff(results["ddp"], results["fsdp_checkpointed"])

    report["rank"] = model.global_rank
    write_report(out, report)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
