"""``${slurm_gpus:${trainer.accelerator},${trainer.devices}}``: the GPUs launcher=slurm asks
for per node. A CPU run asks for none: a partition without GPUs refuses any GPU request
("Invalid generic resource (gres) specification"). ``auto`` asks for ``trainer.devices``, as
a login node rarely has the GPUs its jobs will; ``hydra.launcher.gpus_per_node=N`` still wins.
"""

from omegaconf import OmegaConf


def slurm_gpus(accelerator: str, devices) -> int:
    return 0 if str(accelerator) == "cpu" else int(devices)


def register() -> None:
    if not OmegaConf.has_resolver("slurm_gpus"):
        OmegaConf.register_new_resolver("slurm_gpus", slurm_gpus)
