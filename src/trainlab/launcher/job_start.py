"""The Hydra callback both submitit launchers add (configs/launcher/slurm.yaml,
submitit_local.yaml): each task of a job learns its rank before the run asks for it.

``launcher=slurm`` and ``launcher=submitit_local`` run the same submitit code: one process
per task, a pickled job, a pre-emption signal that checkpoints and requeues it. Under
SLURM, Lightning reads each task's rank from SLURM_PROCID and friends itself. The local
executor names them in SUBMITIT_LOCAL_* variables, which Lightning does not read, so every
task would train alone. submitit's own helper exports them as torch's env:// variables,
and Lightning then sees ranks started externally, as under torchrun.

Importing this module registers ``${slurm_gpus:...}``: Hydra imports it to build the
callback before the launcher reads ``gpus_per_node``, and a job imports it again to unpickle it.
"""

import os

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from trainlab.launcher.slurm_gpus import register

register()


class SubmititJobStart(Callback):
    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        """Export this task's rank for Lightning when it is one of several local tasks."""
        if os.environ.get("SUBMITIT_EXECUTOR") != "local" or "LOCAL_RANK" in os.environ:
            return
        import submitit
        from lightning_utilities.core.rank_zero import rank_zero_only

        env = submitit.helpers.TorchDistributedEnvironment()
        if env.world_size == 1:
            return  # one task: Lightning starts any further ranks itself
        # Not CUDA_VISIBLE_DEVICES: Lightning picks the device of LOCAL_RANK among all of them.
        env.export(set_cuda_visible_devices=False)
        os.environ["MASTER_ADDR"] = "127.0.0.1"  # one machine: loopback, whatever the hostname
        rank_zero_only.rank = env.rank  # read from the environment at import, before this ran
