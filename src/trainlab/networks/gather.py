"""A tensor of every rank, concatenated along the batch, with gradients back to each rank.

For losses on batch statistics (VICReg's variance and covariance, global BatchNorm): each
rank then sees the global batch, as one process would. The backward sums every rank's
gradient for this rank's rows; DDP's averaging of the parameter gradients then gives exactly
the gradient of one process on the global batch. One process: the tensor itself.

Written here because torch deprecates its differentiable all_gather
(torch.distributed.nn.functional, a FutureWarning from torch 2.14 at every call) and its
replacement in torch.distributed._functional_collectives is private. The collectives are
torch.distributed's own: an all-gather forward and a reduce-scatter backward, as torch's
deprecated function did on NCCL (both run on NCCL and gloo).
"""

import torch
import torch.distributed as dist


def _single(name: str, old: str):
    """torch 2.14 renamed the single-tensor collectives (``*_single``) and deprecates the old
    names with a FutureWarning at every call; torch 2.11 has only the old ones. Looked up at
    each call, so that a profiler that wraps torch.distributed's functions sees this one."""
    return getattr(dist, name, None) or getattr(dist, old)


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = x.new_empty((dist.get_world_size() * x.shape[0], *x.shape[1:]))
        _single("all_gather_single", "all_gather_into_tensor")(out, x)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        # Every rank's loss depends on this rank's rows: their gradients summed over ranks.
        grad = grad.contiguous()
        rows = grad.new_empty((grad.shape[0] // dist.get_world_size(), *grad.shape[1:]))
        _single("reduce_scatter_single", "reduce_scatter_tensor")(rows, grad)
        return rows


def gather_batch(x: torch.Tensor) -> torch.Tensor:
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    return _GatherRows.apply(x)
