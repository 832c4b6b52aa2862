"""Checks that run before any process is launched: each failure is one line to fix.

Each combination refused here otherwise crashes deep inside torch, hangs at a barrier,
or (worse) silently trains something other than what the config asked for.
"""

import os

import torch
from omegaconf import DictConfig

from trainlab.utils.errors import ConfigError


def _accelerator(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if name == "gpu" else name


def _device_count(devices, accelerator: str) -> int:
    if isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
        devices = int(devices)
    if devices in ("auto", -1):
        return max(torch.cuda.device_count(), 1) if accelerator == "cuda" else 1
    if isinstance(devices, int):
        return devices
    return len(list(devices))  # a list of device indices, e.g. [0, 2]


def _launched_externally() -> bool:
    return any(k in os.environ for k in ("TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "LOCAL_RANK"))


def check_launch(cfg: DictConfig) -> None:
    """Refuse device, precision and strategy combinations that cannot work here."""
    trainer, strategy = cfg.trainer, cfg.get("strategy") or {}
    accelerator = _accelerator(str(trainer.get("accelerator", "auto")))
    devices = _device_count(trainer.get("devices", 1), accelerator)
    precision = str(trainer.get("precision", "32-true"))
    accumulate = trainer.get("accumulate_grad_batches", 1)

    if accelerator == "cuda":
        available = torch.cuda.device_count()
        if available == 0:
            raise ConfigError(
                "trainer.accelerator asks for a GPU but torch sees none: "
                "set trainer.accelerator=cpu (or check CUDA_VISIBLE_DEVICES and the driver)"
            )
        if devices > available:
            raise ConfigError(
                f"trainer.devices={devices} but this machine has {available} GPU(s): "
                f"set trainer.devices<={available}, or several nodes with trainer.num_nodes"
            )
        if "bf16" in precision and not torch.cuda.is_bf16_supported():
            raise ConfigError(
                f"trainer.precision={precision} needs a GPU with bfloat16 (Ampere or newer): "
                "use trainer.precision=16-mixed"
            )
    elif accelerator == "cpu":
        cores = os.cpu_count() or 1
        if devices > cores:
            raise ConfigError(
                f"trainer.devices={devices} CPU processes but this machine has {cores} cores: "
                f"set trainer.devices<={cores}"
            )
        if precision in ("16-mixed", "16", "16-true"):
            # Lightning would silently switch to bf16-mixed instead.
            raise ConfigError(
                f"trainer.precision={precision} (float16) does not run on CPU: "
                "use trainer.precision=bf16-mixed or 32-true"
            )
        if trainer.get("sync_batchnorm") and devices > 1:
            # torch's SyncBatchNorm refuses CPU tensors in the first forward ("expected
            # input tensor to be on GPU"), after the ranks have started.
            raise ConfigError(
                "trainer.sync_batchnorm=true runs on GPUs only (torch's SyncBatchNorm): "
                "drop it on CPUs, where each rank normalises its own batch"
            )
    if trainer.get("num_nodes", 1) > 1 and not _launched_externally():
        raise ConfigError(
            f"trainer.num_nodes={trainer.num_nodes} needs one launch per node: start this "
            "command with scripts/torchrun.sh or scripts/slurm.sbatch on every node"
        )

    schedules = [
        c
        for c in (cfg.get("callbacks") or {}).values()
        if c and str(c.get("_target_", "")).endswith("GradientAccumulationScheduler")
    ]
    if strategy.get("static_graph") and (accumulate > 1 or schedules):
        # no_sync under a static graph can skip the all-reduce (github.com/pytorch/pytorch/issues/143580).
        raise ConfigError(
            "strategy.static_graph=true with trainer.accumulate_grad_batches > 1 can skip "
            "gradient synchronisation silently: set strategy.static_graph=false"
        )
    if strategy and "_target_" not in strategy:
        key = next(iter(strategy))
        raise ConfigError(
            f"strategy.{key} is given but the strategy group chose none (strategy=auto: "
            "Lightning's choice, which takes no keys): choose one that takes it from "
            "configs/strategy/, or drop it"
        )
