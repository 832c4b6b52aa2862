"""``python train.py [overrides]``: compose the config (Hydra), refuse what is wrong at once,
then train (training.py).

The checks that need no torch run here, before torch and Lightning are imported (importing
them takes seconds): a mistyped value costs a second, not a start-up.
"""

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from trainlab.checks import check_before_torch
from trainlab.checks.hydra_errors import one_line_hydra_errors
from trainlab.run import run_dir as rundir
from trainlab.run.failures import run_task
from trainlab.run.overrides import experiment_changes
from trainlab.utils.logging import get_logger

log = get_logger(__name__)
CONFIGS = str(Path(__file__).resolve().parents[2] / "configs")


def checked_train(cfg: DictConfig) -> float | None:
    """``training.train`` once the checks that need no torch have passed."""
    check_before_torch(cfg, "train")
    from trainlab.training import train  # torch and Lightning: only now

    return train(cfg)


@one_line_hydra_errors
@hydra.main(version_base="1.3", config_path=CONFIGS, config_name="train")
def train_command(cfg: DictConfig) -> float | None:
    rundir.hold_log_records()  # train.log opens only once the run is accepted
    hydra_cfg = HydraConfig.get()
    for line in experiment_changes(
        Path(CONFIGS), hydra_cfg.runtime.choices, list(hydra_cfg.overrides.task)
    ):
        log.warning(line)
    return run_task(checked_train, cfg)
