"""``python train.py [overrides]``: compose the config, refuse what is wrong at once, train.

Hydra's parsing and the checks that need no torch run here, before torch and Lightning are
imported (importing them takes seconds); the run itself is trainlab.run.training.
"""

from pathlib import Path

import hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from trainlab.run import run_dir as rundir
from trainlab.run.config_checks import check_config
from trainlab.run.hydra_errors import one_line_hydra_errors
from trainlab.run.override_types import check_override_types
from trainlab.run.overrides import experiment_changes
from trainlab.run.task import run_task
from trainlab.strategy.submitit_ranks import adopt_submitit_local_ranks
from trainlab.utils.logging import get_logger

log = get_logger(__name__)
CONFIGS = str(Path(__file__).resolve().parents[2] / "configs")


def train(cfg: DictConfig) -> float | None:
    """Fit (and test) the configured model; return ``cfg.optimized_metric`` for sweepers."""
    check_config(cfg, rundir.command_line_overrides(), imports=False)
    if GlobalHydra.instance().is_initialized():  # from a command line (not a child rank,
        # which runs rank 0's checked config, nor a test's composed config); after the
        # values: it composes the config once more (0.2-0.3 s)
        check_override_types(cfg, "train", list(HydraConfig.get().overrides.task))
    adopt_submitit_local_ranks()  # before anything asks which rank this is
    if rundir.is_global_zero():  # a file check: a run dir in use or finished, refused now
        rundir.guard(Path(cfg.paths.output_dir), resume=cfg.get("resume", False))
    from trainlab.run.training import train as fit  # torch and Lightning: only now

    return fit(cfg)


@one_line_hydra_errors
@hydra.main(version_base="1.3", config_path=CONFIGS, config_name="train")
def main(cfg: DictConfig) -> float | None:
    rundir.hold_log_records()  # train.log opens only once the run is accepted
    hydra_cfg = HydraConfig.get()
    for line in experiment_changes(
        Path(CONFIGS), hydra_cfg.runtime.choices, list(hydra_cfg.overrides.task)
    ):
        log.warning(line)
    return run_task(train, cfg)
