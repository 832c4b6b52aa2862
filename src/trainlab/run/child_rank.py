"""Entry point of a child rank started by ``ConfigLauncher``: run one job's saved config.

``python -m trainlab.run.child_rank <run_dir>/.rank_config.yaml`` with LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT set by rank 0. No Hydra here: the config is
already composed and resolved, and a child rank must not make run dirs of its own.

A child stopped by a signal (every rank saves at the same batch: run/fit.py) exits 0 and
leaves 128 + signal to rank 0, the job's process: Lightning's process observer in rank 0
SIGKILLs rank 0 and every child as soon as one child exits non-zero, which cut rank 0 off
mid-teardown when a signal reached every process of the job at once (srun, a group kill).
"""

import logging
import sys

from omegaconf import OmegaConf

from trainlab.run.failures import run_task
from trainlab.run.fit import STOP_CODES
from trainlab.run.training import train

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="[%(asctime)s][%(name)s] %(message)s")
    try:
        run_task(train, OmegaConf.load(sys.argv[1]))
    except SystemExit as stop:
        if stop.code not in STOP_CODES:
            raise
        sys.exit(0)
