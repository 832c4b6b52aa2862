"""Where an I-JEPA training step's time goes: the matrix products against everything else.

The step bench (step.py) compares whole steps. This one bounds what a faster step can gain
at the same token counts: matrix products (linear layers, attention) are the
same FLOPs in every faithful implementation, so the rest of the step (norms, activations,
casts, copies, optimizer, EMA) is all a faster step can remove, unless it runs the same
products faster. torch.profiler gives the shares, torch.utils.flop_counter the FLOPs.
"""

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from trainlab.callbacks.cpu_bf16_attention import write_attention_out
from trainlab.model.networks.masks import step_generator

# The kernels that run matrix products in the step (both attention paths included). The patch
# embedding's convolution (under 1 % of the step) counts with the rest: the bound is generous.
MATRIX_OPS = {
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
}


def profile_step(make_model, images, bf16: bool, steps: int = 10, warmup: int = 3) -> dict:
    """trainlab's eager step (bare loop, as step.py's), profiled over ``steps`` steps."""
    model = make_model().train()
    if bf16:
        write_attention_out(model)  # as a bf16 run on a CPU does
    optimizer = model.configure_optimizers()

    def step(i: int) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, _ = model.loss(images, step_generator(0, 0, i))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        model.update_target(0.998)

    for i in range(warmup):
        step(i)
    with FlopCounterMode(display=False) as flops:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, _ = model.loss(images, step_generator(0, 0, 0))
        loss.backward()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            step(i)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    matrix = sum(e.self_cpu_time_total for e in events if e.key in MATRIX_OPS)
    matrix_s = matrix / 1e6 / steps
    return {
        "step_ms": total / 1e3 / steps,
        "matrix_share": matrix / total,
        "gflop": flops.get_total_flops() / 1e9,
        "matrix_gflops": flops.get_total_flops() / 1e9 / matrix_s,
    }


def bench(make_model, images) -> dict:
    return {p: profile_step(make_model, images, p == "bf16") for p in ("float32", "bf16")}


def table(results: dict) -> str:
    rows = [
        "| precision | ms per step (profiled) | matrix products: share of the step | "
        "GFLOP per step | their GFLOP/s | every other op removed: step x |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        rows.append(
            f"| {name} | {r['step_ms']:.0f} | {r['matrix_share']:.0%} | {r['gflop']:.1f} | "
            f"{r['matrix_gflops']:.0f} | {1 / r['matrix_share']:.2f}x |"
        )
    return "\n".join(rows)
