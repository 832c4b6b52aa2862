"""Checkpoints where a run stopped: last.ckpt on SIGTERM / SIGUSR1, on_exception.ckpt on an error.

Lightning turns SIGTERM into a SIGTERMException at the next batch, on every rank at once,
and calls ``on_exception``; here that saves last.ckpt, which ``resume=true`` continues
from. SIGUSR1 (the usual pre-emption notice) is routed to the same path, except under
SLURM with auto-requeue, where Lightning's own SIGUSR1 handler saves and requeues.

On any other exception Lightning's OnExceptionCheckpoint calls ``trainer.save_checkpoint``,
whose barrier waits for every rank: when one rank fails alone, it hangs until the process
group times out. Here the failing rank writes its own state without any collective.
"""

import os
import signal
from pathlib import Path

import lightning as L
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.strategies import ModelParallelStrategy
from lightning.pytorch.utilities.exceptions import SIGTERMException

from trainlab.utils.logging import get_logger

log = get_logger(__name__)


class InterruptionCheckpoint(L.Callback):
    def __init__(self, dirpath: str):
        self.dirpath = Path(dirpath)
        self.signal: signal.Signals | None = None  # the signal that stopped the run
        self._previous: dict = {}

    # -- signals ---------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module, stage: str) -> None:
        if stage != "fit":
            return
        self.signal = None
        # Lightning registers its SIGTERM handler after setup and calls ours from it.
        self._previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, self._note)}
        env = trainer._accelerator_connector.cluster_environment
        if not (isinstance(env, SLURMEnvironment) and env.auto_requeue):
            self._previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, self._on_sigusr1)

    def _note(self, signum, frame) -> None:
        self.signal = self.signal or signal.Signals(signum)

    def _on_sigusr1(self, signum, frame) -> None:
        self.signal = signal.SIGUSR1
        os.kill(os.getpid(), signal.SIGTERM)  # Lightning's pre-emption path, on every rank

    def teardown(self, trainer: L.Trainer, pl_module, stage: str) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    # -- saving ----------------------------------------------------------------------------
    def on_exception(self, trainer: L.Trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException):
            # Every rank is here at the same batch: a normal, collective save.
            trainer.save_checkpoint(self.dirpath / "last.ckpt")
            return
        if isinstance(trainer.strategy, ModelParallelStrategy):
            log.warning("no on_exception checkpoint under FSDP: saving sharded state needs every rank")
            return
        rank = trainer.global_rank
        path = self.dirpath / ("on_exception.ckpt" if rank == 0 else f"on_exception.rank{rank}.ckpt")
        # dump_checkpoint gathers nothing across ranks under DDP (each holds the full state).
        checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
        trainer.strategy.checkpoint_io.save_checkpoint(checkpoint, path)
        log.info(f"saved the state at the error to {path}")
