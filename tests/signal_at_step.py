"""A test callback: the process sends itself a signal after a given optimizer step.

Added from the command line with PYTHONPATH=tests:
    +callbacks.signal._target_=signal_at_step.SignalAtStep +callbacks.signal.step=4
"""

import os
import signal

import lightning as L


class SignalAtStep(L.Callback):
    def __init__(self, step: int, name: str = "SIGTERM", rank: int = 0):
        self.step, self.signum, self.rank = step, signal.Signals[name], rank
        self.sent = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step and trainer.global_rank == self.rank and not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.signum)
