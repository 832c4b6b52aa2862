"""Entry point of a child rank started by ``ConfigLauncher``: run one job's saved config.

``python -m trainlab.run.child_rank <run_dir>/.rank_config.yaml`` with LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT set by rank 0. No Hydra here: the config is
already composed and resolved, and a child rank must not make run dirs of its own.
"""

import logging
import sys

from omegaconf import OmegaConf

from trainlab.run.failures import run_task
from trainlab.run.training import train

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="[%(asctime)s][%(name)s] %(message)s")
    run_task(train, OmegaConf.load(sys.argv[1]))
