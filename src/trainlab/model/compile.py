"""``compile=true``: torch.compile a LightningModule's networks, and the work it names outside
them, in place."""

import lightning as L
import torch


def compile_networks(model: L.LightningModule, backend="inductor") -> None:
    """Each child with parameters, in place, and each method in the module's
    ``compiled_methods`` (work that runs outside a network's forward, such as I-JEPA's target
    encoder's ``forward_intermediates``). Compiling the LightningModule itself would trace
    into Lightning's logging, ``torch.compile(net)`` would rename state_dict keys, and
    metrics and batch transforms need no compiling.

    A module whose step has a bounded set of shapes (``static_shapes``: how many, e.g. I-JEPA's
    ``masks.fixed_shapes``) is compiled with ``dynamic=False``: each shape once, no symbolic
    sizes (inductor failed on them at ViT-H, benchmarks/gpu.md). Otherwise torch decides.
    """
    dynamic = None
    if shapes := getattr(model, "static_shapes", 0):
        dynamic = False
        # Each shape compiles once for training and once for evaluation (a guard on
        # module.training): torch's default limit of 8 per function would fall back to eager.
        torch._dynamo.config.recompile_limit = max(
            torch._dynamo.config.recompile_limit, 2 * shapes + 2
        )
    for network in model.children():
        if any(True for _ in network.parameters()):
            network.compile(dynamic=dynamic, backend=backend)
    for name in getattr(model, "compiled_methods", ()):
        setattr(model, name, torch.compile(getattr(model, name), dynamic=dynamic, backend=backend))
