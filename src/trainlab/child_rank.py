"""A child rank started by ``ConfigLauncher``: ``python -m trainlab.child_rank
<run_dir>/.rank_config.yaml`` (LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set by rank
0) runs rank 0's composed and resolved config, without Hydra: a child makes no run dir.

A child stopped by a signal (every rank saves at the same batch: run/fit.py) exits 0 and
leaves 128 + signal to rank 0: Lightning's process observer in rank 0 kills every process as
soon as one child exits non-zero, which cut rank 0 off mid-teardown when a signal reached
every process at once (srun, a group kill).
"""

import logging
import sys

if __name__ == "__main__":
    # Before Lightning is imported: it gives its loggers console handlers of their own, which
    # print unformatted, wherever the root logger has none yet. A child prints warnings only:
    # rank 0 already says what Lightning says at INFO.
    console = logging.StreamHandler()
    console.setLevel(logging.WARNING)  # the root logger's own level is WARNING already
    logging.basicConfig(format="[%(asctime)s][%(name)s] %(message)s", handlers=[console])
    from omegaconf import OmegaConf

    from trainlab.run.failures import run_task
    from trainlab.run.fit import STOP_CODES
    from trainlab.training import train

    try:
        run_task(train, OmegaConf.load(sys.argv[1]))
    except SystemExit as stop:
        if stop.code not in STOP_CODES:
            raise
        sys.exit(0)
