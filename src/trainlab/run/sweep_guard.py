"""A multirun into a sweep dir that already holds results is refused before Hydra writes
anything there: Hydra's basic sweeper saves ``multirun.yaml`` into the sweep dir before the
first job starts, so a refusal by the jobs' own run-dir check (run/run_dir.py ``guard``)
came after that file of the finished sweep was overwritten.

Hydra calls ``on_multirun_start`` in the launching process before the sweeper, and turns a
callback's exception into a warning: the refusal exits here, one line and exit 2. trainlab's
Optuna sweeper is exempt: it owns its study dir, and a re-run continues the study there.
"""

import sys
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from trainlab.run.run_dir import LOCK_FILE, RESULT_FILES
from trainlab.utils.errors import UserError

CONTINUES_ITS_DIR = ("hydra_plugins.trainlab_optuna.",)


class SweepGuard(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        if str(config.hydra.sweeper.get("_target_", "")).startswith(CONTINUES_ITS_DIR):
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        used = [p for name in (*RESULT_FILES, LOCK_FILE) for p in sweep_dir.glob(f"*/{name}")]
        if used:
            print(
                f"error: sweep dir {sweep_dir} already holds runs "
                f"({used[0].relative_to(sweep_dir)}{' and more' if len(used) > 1 else ''}): "
                "its results stay as they are; give the sweep another hydra.sweep.dir",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(UserError.exit_code)
