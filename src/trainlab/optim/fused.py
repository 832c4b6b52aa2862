"""The fused optimizer kernel by default: one kernel over all parameters instead of a chain of
``torch._foreach_*`` ops, each a full pass over every parameter and optimizer state.

On one H200 at ViT-H/14 (benchmarks/gpu.md) trainlab's bare step ran at 453 samples/s with
fused AdamW against 232 with torch's default (foreach); on this project's CPUs fused was not
slower (benchmarks/ijepa.md, the step table). torch leaves ``fused`` off by default, so it is
turned on here, in one place, for every optimizer whose class takes it (Adam, AdamW, SGD,
Adagrad): an optimizer config that names ``fused`` or ``foreach`` itself, or an optimizer
without the argument, is left exactly as configured.
"""

import functools
import inspect


def fused_by_default(make_optimizer):
    """``make_optimizer`` (a partial of a torch optimizer, from the config), with
    ``fused=True`` unless it says otherwise or its class has no fused kernel."""
    keywords = getattr(make_optimizer, "keywords", {})
    if "fused" in keywords or "foreach" in keywords:
        return make_optimizer
    try:
        accepted = inspect.signature(getattr(make_optimizer, "func", make_optimizer)).parameters
    except (TypeError, ValueError):  # a callable without a signature: leave it alone
        return make_optimizer
    if "fused" not in accepted:
        return make_optimizer
    return functools.partial(make_optimizer, fused=True)
