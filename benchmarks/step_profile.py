"""Where an I-JEPA training step's time goes: the matrix products against everything else.

The step bench (step.py) compares whole steps. This one bounds what removing overhead can
gain: the rest of the step (norms, activations, casts, copies, optimizer, EMA) is all that
cutting overhead removes, so beyond that bound a faster step must run fewer matrix products
(as the predictor's last block does, on its target rows alone) or run them faster.
torch.profiler gives the shares, torch.utils.flop_counter the FLOPs.
"""

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.step import loop_rate
from trainlab.utils.seeding import step_generator

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


def profile_step(make_model, images, labels, bf16: bool, steps: int = 10, warmup: int = 3) -> dict:
    """trainlab's eager step, step.py's bare loop as it is, profiled over ``steps`` steps after
    ``warmup`` (model building and warm-up fall outside the profiler's active window)."""
    schedule = torch.profiler.schedule(wait=0, warmup=warmup, active=steps, repeat=1)
    traces = []
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule,
        on_trace_ready=lambda done: traces.append(done.key_averages()),
    ) as prof:
        loop_rate(make_model, images, labels, steps, warmup, bf16=bf16, after_step=prof.step)
    # The FLOPs of one step on the profiled masks: loop_rate's timed step j draws mask j.
    model = make_model().train()
    with FlopCounterMode(display=False) as counted:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = sum(model.loss(images, step_generator(0, 0, j))[0] for j in range(steps))
        loss.backward()
    (events,) = traces
    total = sum(e.self_cpu_time_total for e in events)
    matrix = sum(e.self_cpu_time_total for e in events if e.key in MATRIX_OPS)
    matrix_s = matrix / 1e6 / steps
    gflop = counted.get_total_flops() / 1e9 / steps
    return {
        "step_ms": total / 1e3 / steps,
        "matrix_share": matrix / total,
        "gflop": gflop,
        "matrix_gflops": gflop / matrix_s,
    }


def bench(make_model, images, labels) -> dict:
    return {p: profile_step(make_model, images, labels, p == "bf16") for p in ("float32", "bf16")}


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
