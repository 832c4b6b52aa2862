"""Buffers that DDP leaves alone.

DDP broadcasts every buffer from rank 0 before each forward (``broadcast_buffers``), except
the names a module lists in ``_ddp_params_and_buffers_to_ignore``; torch sets that list with
``DistributedDataParallel._set_params_and_buffers_to_ignore_for_model``, which replaces it.
This adds to it, so the base, a method and a fork can each exempt their own state.
"""

from collections.abc import Iterable

from torch import nn

from trainlab.utils import torch_internals


def keep_out_of_buffer_broadcast(module: nn.Module, names: Iterable[str]) -> None:
    """Add ``names`` (dotted, relative to ``module``) to what DDP will not broadcast; call
    before DDP wraps the module (a LightningModule's ``setup``)."""
    ignored = torch_internals.ddp_ignored_names(module) | set(names)
    torch_internals.set_ddp_ignored_names(module, ignored)
