"""Gradients in their parameter's strides, where the two differ only in dimensions of size 1.

On CPUs, a depthwise convolution's weight gradient (C, 1, k, k) and a 1x1 convolution's
(out, in, 1, 1) come back with other strides in their size-1 dimensions than the parameter's
(ConvNeXt's blocks): the same memory layout, which autograd accepts, but DDP compares the
strides literally and warns that they "do not match bucket view strides" on every rank.
Restriding such a gradient is a view of the same storage with the same addresses: no copy.
Written here: neither torch nor timm normalises these strides.
"""

import torch
from torch import nn


def same_layout(grad: torch.Tensor, param: torch.Tensor) -> bool:
    """The strides agree in every dimension of more than one element."""
    return all(s == 1 or a == b for s, a, b in zip(grad.shape, grad.stride(), param.stride(), strict=True))  # fmt: skip


def _restride(param: nn.Parameter):
    def hook(grad: torch.Tensor) -> torch.Tensor:
        if grad.stride() == param.stride() or not same_layout(grad, param):
            return grad
        return grad.as_strided(grad.shape, param.stride(), grad.storage_offset())

    return hook


def keep_grad_strides(module: nn.Module) -> nn.Module:
    """Give every gradient of ``module``'s parameters with a size-1 dimension its
    parameter's strides (a tensor hook, run before the gradient is accumulated)."""
    for param in module.parameters():
        if param.requires_grad and 1 in param.shape:
            param.register_hook(_restride(param))
    return module
