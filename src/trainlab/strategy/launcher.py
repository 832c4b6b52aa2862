"""Start ranks 1..N-1 of a job from the job's own composed config, not from ``sys.argv``.

Lightning's subprocess launcher re-runs the command line in every child rank. Under
Hydra multirun (``-m``) that command is the whole sweep: each child would run every job
again on its own, with its own run dirs, and a sampling sweeper (Optuna) would even give
the ranks of one job different values. This launcher writes the job's resolved config
next to its run and starts each child with ``python -m trainlab.child_rank``, which
runs exactly that job. Ranks started externally (torchrun, SLURM) are left alone.
"""

import os
import subprocess
import sys
from pathlib import Path

import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from trainlab.utils import lightning_internals
from trainlab.utils.lightning_internals import LauncherHooks, SubprocessScriptLauncher

RANK_CONFIG = ".rank_config.yaml"  # in the run dir; read by the child ranks
_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")


class ConfigLauncher(LauncherHooks):
    """Lightning's script launcher whose children run one job's saved config."""

    def __init__(self, base: SubprocessScriptLauncher, config_path: Path) -> None:
        super().__init__(base.cluster_environment, base.num_processes, base.num_nodes)
        self.config_path = config_path
        self._env_before = {k: os.environ.get(k) for k in _ENV}

    def call_children_scripts(self) -> None:
        # Same environment as Lightning's launcher; only the command differs.
        self.check_can_spawn_children()
        env = self.cluster_environment
        os.environ["MASTER_ADDR"] = env.main_address
        os.environ["MASTER_PORT"] = str(env.main_port)
        os.environ["NODE_RANK"] = str(env.node_rank())
        os.environ["LOCAL_RANK"] = str(env.local_rank())
        os.environ["WORLD_SIZE"] = str(self.num_processes * self.num_nodes)
        command = [sys.executable, "-m", "trainlab.child_rank", str(self.config_path)]
        for local_rank in range(1, self.num_processes):
            child_env = {**os.environ, "LOCAL_RANK": str(local_rank)}
            self.procs.append(subprocess.Popen(command, env=child_env))
        lightning_internals.launch_process_observer(self.procs)

    def launch(self, function, *args, trainer=None, **kwargs):
        self.cluster_environment.validate_settings(self.num_processes, self.num_nodes)
        if not self.procs and not self.cluster_environment.creates_processes_externally:
            self.call_children_scripts()
        # one OMP thread count per rank, as Lightning's launcher sets it
        lightning_internals.set_num_threads_if_needed(num_processes=self.num_processes)
        return function(*args, **kwargs)

    def finish(self, timeout: float = 120) -> None:
        """Wait for the children and undo this job's process group and environment, so
        that the next job of a multirun starts its own ranks on a clean slate."""
        for proc in self.procs:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()  # a child stuck after rank 0 finished must not outlive the job
                proc.wait()
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        for key, value in self._env_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def launch_ranks_from_config(trainer, cfg: DictConfig, run_dir: Path) -> ConfigLauncher | None:
    """Swap Lightning's script launcher for a ``ConfigLauncher`` (rank 0 of a local launch)."""
    launcher = lightning_internals.launcher(trainer.strategy)
    if type(launcher) is not SubprocessScriptLauncher:
        return None
    if launcher.cluster_environment.creates_processes_externally:
        return None  # torchrun / SLURM / a child rank: every process is already there
    path = run_dir / RANK_CONFIG
    run_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, path, resolve=True)  # ${now:...} and ${hydra:...} fixed for the children
    child_launcher = ConfigLauncher(launcher, path)
    lightning_internals.set_launcher(trainer.strategy, child_launcher)
    return child_launcher
