"""What activation checkpointing trades for recomputation: the bytes one training step saves
for backward, counted with autograd's saved-tensor hooks (a CPU has no allocator counter)."""

import torch

from trainlab.utils.seeding import step_generator


def saved_activation_bytes(module, images) -> int:
    """Bytes of the tensors one eager ``module.loss`` saves for backward (each storage once;
    the module's own parameters, which it saves by reference, not counted)."""
    seen = {
        (p.untyped_storage().data_ptr(), p.untyped_storage().nbytes()) for p in module.parameters()
    }
    total = 0

    def pack(t):
        nonlocal total
        storage = t.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if key not in seen:
            seen.add(key)
            total += key[1]
        return t

    # Eager also under compile=true (force_eager: torch.compiler.disable leaves explicitly
    # compiled networks compiled): traced, these hooks recompiled 18 times on an H100, 2
    # minutes before the first step, and the probe's batch sizes would add graphs of their own.
    with torch.compiler.set_stance("force_eager"):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module.loss(images, step_generator(0, 0, 0))
    return total
