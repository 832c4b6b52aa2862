"""Fully sharded data parallel (FSDP2, ``fully_shard``) for any LightningModule, by config.

Lightning's ``FSDPStrategy`` wraps with FSDP1 and refuses CPU; its ``ModelParallelStrategy``
runs FSDP2 on any backend but expects every LightningModule to shard itself in
``configure_model``. This subclass shards from config instead (which blocks, resharding,
mixed precision, activation checkpointing), so the models stay free of parallel code.
"""

from typing import Any

import torch
from hydra.utils import get_class
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.fsdp import (
    FSDPModule,
    MixedPrecisionPolicy,
    fully_shard,
    register_fsdp_forward_method,
)

from trainlab.utils import torch_internals

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class FSDPStrategy(ModelParallelStrategy):
    """Shard every ``shard_modules`` block, then the whole LightningModule, over all ranks.

    Args:
        shard_modules: class paths of the blocks that become FSDP units (one all-gather
            each), e.g. ``timm.models.vision_transformer.Block``.
        reshard_after_forward: True frees gathered parameters after forward (ZeRO-3, least
            memory); False keeps them until backward (ZeRO-2, less communication).
        param_dtype / reduce_dtype: FSDP's mixed-precision policy (null = parameter dtype).
        activation_checkpointing: recompute each block's activations in backward.
        forward_methods: methods other than ``forward`` that callers use as one (timm's
            ``forward_intermediates``): FSDP2 gathers a unit's parameters only around the
            methods it knows, so these are registered on every unit that has them.
        **kwargs: ``ModelParallelStrategy`` arguments (timeout, backend, checkpoint format).
    """

    def __init__(
        self,
        shard_modules: list[str],
        reshard_after_forward: bool = True,
        param_dtype: str | None = None,
        reduce_dtype: str | None = None,
        activation_checkpointing: bool = False,
        forward_methods: tuple[str, ...] = ("forward_intermediates",),
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("tensor_parallel_size", 1)  # pure data parallel: shard over all ranks
        kwargs.setdefault("data_parallel_size", "auto")
        super().__init__(**kwargs)
        self.shard_classes = tuple(get_class(path) for path in shard_modules)
        self.reshard_after_forward = reshard_after_forward
        self.mp_policy = MixedPrecisionPolicy(
            param_dtype=_DTYPES[param_dtype] if param_dtype else None,
            reduce_dtype=_DTYPES[reduce_dtype] if reduce_dtype else None,
        )
        self.activation_checkpointing = activation_checkpointing
        self.forward_methods = tuple(forward_methods)

    def setup_environment(self) -> None:
        if self._data_parallel_size == "auto":
            self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()

    def setup(self, trainer) -> None:
        if not any(isinstance(m, FSDPModule) for m in self.model.modules()):  # fit, then test
            self.shard(self.model)
        # ModelParallelStrategy insists on a configure_model override in the module; here
        # sharding came from config, so satisfy that check on the instance only.
        self.lightning_module.configure_model = lambda: None
        super().setup(trainer)

    def shard(self, module: torch.nn.Module) -> None:
        """Blocks become units; so does every other module holding parameters of its own.

        A LightningModule calls its parts (encoder, predictor, probe) directly instead of
        through one root ``forward``, and FSDP2 gathers a unit's parameters only when that
        unit's own forward runs. So the small modules outside the blocks (patch embedding,
        norms, heads) are units of their own rather than parts of one root unit.
        """
        if self.activation_checkpointing:
            torch_internals.apply_activation_checkpointing(
                module, check_fn=lambda m: isinstance(m, self.shard_classes)
            )
        mesh, policy = self.device_mesh["data_parallel"], self.mp_policy

        def shard(unit: torch.nn.Module) -> None:
            # A unit no gradient reaches (an EMA target) has no backward to reshard it: kept
            # whole after its forward, its parameters would meet the sharded ones of the
            # network it follows as plain tensors in the EMA update.
            trained = any(p.requires_grad for p in unit.parameters())
            reshard = self.reshard_after_forward or not trained
            fully_shard(unit, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)

        in_blocks = set()
        for block in module.modules():
            if isinstance(block, self.shard_classes):
                in_blocks.update(id(m) for m in block.modules())
                shard(block)
        for child in reversed(list(module.modules())):  # descendants before ancestors
            own = any(True for _ in child.parameters(recurse=False))
            if own and id(child) not in in_blocks:
                shard(child)
                for name in self.forward_methods:
                    if hasattr(child, name):
                        register_fsdp_forward_method(child, name)
