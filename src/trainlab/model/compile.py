"""``compile=true``: torch.compile a LightningModule's networks in place."""

import lightning as L


def compile_networks(model: L.LightningModule) -> None:
    """Each child with parameters, in place. Compiling the LightningModule itself would trace
    into Lightning's logging, ``torch.compile(net)`` would rename state_dict keys, and
    metrics and batch transforms need no compiling."""
    for network in model.children():
        if any(True for _ in network.parameters()):
            network.compile()
