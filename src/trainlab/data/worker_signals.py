"""Data loader workers leave stop signals to the main process.

SLURM's ``srun``, GNU ``timeout`` and ``kill -- -PGID`` signal every process of a job, the
loader's workers included. A worker killed by SIGTERM or SIGUSR1 makes the main process
raise "DataLoader worker ... is killed by signal" before it can save, and the run is lost.
Workers that ignore the stop signals let the main process save last.ckpt at its next batch
(callbacks/interruption.py) and then end its workers itself. Ctrl-C (SIGINT) too: a forked
worker inherits the main process's handler, and each worker said it would save.

multiprocessing ends a process's live workers at its exit with SIGTERM and waits for them,
which such a worker ignores: ``end_workers`` kills them first (atexit runs it before
multiprocessing's own exit hook), so no process waits at its exit for ever.
"""

import atexit
import multiprocessing
import os
import signal

from lightning.fabric.utilities.seed import pl_worker_init_function

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)


def init_worker(worker_id: int) -> None:
    """A loader's ``worker_init_fn``: ignore the stop signals, then seed the worker as
    Lightning does under ``seed_everything(workers=True)`` (it adds its seeding only to a
    loader without a ``worker_init_fn`` of its own)."""
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)
    if int(os.environ.get("PL_SEED_WORKERS", 0)):
        pl_worker_init_function(worker_id)


def end_workers() -> None:
    """SIGKILL this process's data workers still alive at its exit (they hold nothing to
    save: the main process has its checkpoint)."""
    for child in multiprocessing.active_children():
        if child.daemon:  # torch's loader workers; a user's own non-daemon process is left
            child.kill()


atexit.register(end_workers)  # after multiprocessing's registration, so it runs before it
