"""AdamW's foreach path against its fused kernel, on the parameters of a ViT: time per
optimizer step, and the operators each path runs (torch.profiler), which says why foreach
costs more: it runs AdamW as a chain of ``torch._foreach_*`` ops, each a full pass over
every parameter or optimizer state, with temporaries between them, where the fused kernel
reads each parameter, gradient and moment once and writes them once.

    python -m benchmarks.optimizer [--size vit_small] [--repeats 5]
"""

import argparse
import statistics
import time
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

from trainlab.networks.vit import ViTEncoder
from trainlab.optim.param_groups import decay_groups


def make(size: str, fused: bool):
    torch.manual_seed(0)
    net = ViTEncoder(img_size=224, patch_size=16, in_chans=3, size=size)
    for p in net.parameters():
        p.grad = torch.randn_like(p)
    kind = {"fused": True} if fused else {"foreach": True}
    return net, torch.optim.AdamW(decay_groups(net, ""), lr=1e-3, weight_decay=0.05, **kind)


def seconds_per_step(optimizer, steps: int = 5) -> float:
    optimizer.step()  # the moments are allocated at the first step
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    return (time.perf_counter() - start) / steps


def operators(optimizer) -> Counter:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        optimizer.step()
    return Counter(
        e.name for e in prof.events() if e.name.startswith(("aten::_foreach", "aten::_fused"))
    )


def bench(size: str = "vit_small", repeats: int = 5) -> dict:
    nets = {name: make(size, name == "fused") for name in ("foreach", "fused")}
    times = {name: [] for name in nets}
    for _ in range(repeats):  # alternating, so drift on a shared machine hits both
        for name, (_, opt) in nets.items():
            times[name].append(seconds_per_step(opt))
    params = sum(p.numel() for p in nets["fused"][0].parameters())
    return {
        "params": params,
        "tensors": len(list(nets["fused"][0].parameters())),
        "ms": {n: 1000 * statistics.median(t) for n, t in times.items()},
        "ops": {n: operators(opt) for n, (_, opt) in nets.items()},
    }


def markdown(result: dict) -> str:
    ms, ops = result["ms"], result["ops"]

    def which(calls: Counter) -> str:
        return ", ".join(f"{k.removeprefix('aten::')} x{v}" for k, v in calls.most_common())

    lines = "\n".join(
        f"| {name} | {ms[name]:.1f} | {sum(c.values())} | {which(c)} |" for name, c in ops.items()
    )
    return f"""{result["params"] / 1e6:.1f} M parameters in {result["tensors"]} tensors, AdamW with weight decay on
matrices only (two parameter groups), float32, medians of alternating repeats.

| path | ms per step | operator calls per step | which |
|---|---|---|---|
{lines}
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="vit_small")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(markdown(bench(args.size, args.repeats)))


if __name__ == "__main__":
    main()
