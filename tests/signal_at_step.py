"""A test callback: the process sends itself a signal after a given optimizer step, or
with ``group=true`` to its whole process group (its data workers and ranks too), as SLURM's
srun and ``kill -- -PGID`` do.

Added from the command line with PYTHONPATH=tests:
    +callbacks.signal._target_=signal_at_step.SignalAtStep +callbacks.signal.step=4
"""

import os
import signal

import lightning as L


class SignalAtStep(L.Callback):
    def __init__(
        self,
        step: int,
        name: str = "SIGTERM",
        rank: int = 0,
        in_validation: bool = False,
        in_test: bool = False,
        times: int = 1,
        group: bool = False,
    ):
        self.group = group
        self.in_validation = in_validation  # at the start of validation instead of a batch end
        self.in_test = in_test  # at the start of the final test
        self.step, self.signum, self.rank = step, signal.Signals[name], rank
        self.times = times  # 2: two quick Ctrl-C
        self.sent = False

    def on_validation_start(self, trainer, pl_module) -> None:
        if self.in_validation:
            self._maybe_send(trainer)

    def on_test_start(self, trainer, pl_module) -> None:
        if self.in_test:
            self._maybe_send(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not (self.in_validation or self.in_test):
            self._maybe_send(trainer)

    def _maybe_send(self, trainer) -> None:
        if trainer.global_step == self.step and trainer.global_rank == self.rank and not self.sent:
            self.sent = True
            for _ in range(self.times):
                if self.group:
                    os.killpg(os.getpgid(0), self.signum)
                else:
                    os.kill(os.getpid(), self.signum)


class RaiseAtStep(L.Callback):
    """A test callback: one rank raises an error at a given optimizer step, the others go on."""

    def __init__(self, step: int, rank: int = 1):
        self.step, self.rank = step, rank

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step and trainer.global_rank == self.rank:
            raise RuntimeError(f"rank {self.rank} failed alone at step {self.step}")


class WaitForSignalAtStep(L.Callback):
    """A test callback: after a given optimizer step (or, with ``in_test``, where the final
    test starts), every rank writes ``<marker>.<rank>`` and waits (at most ``timeout`` s)
    until a stop signal reaches it, so that a signal sent from outside (``scancel -s USR1``,
    a launcher) lands at a known point. Once: where its marker exists, a resumed run goes on."""

    def __init__(self, marker: str, step: int = -1, in_test: bool = False, timeout: float = 120):
        self.step, self.marker, self.in_test, self.timeout = step, marker, in_test, timeout

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step and not self.in_test:
            self._wait(trainer)

    def on_test_start(self, trainer, pl_module) -> None:
        if self.in_test:
            self._wait(trainer)

    def _wait(self, trainer) -> None:
        import time
        from pathlib import Path

        from trainlab.callbacks.interruption import InterruptionCheckpoint

        marker = Path(f"{self.marker}.{trainer.global_rank}")
        if marker.exists():
            return
        (saver,) = [c for c in trainer.callbacks if isinstance(c, InterruptionCheckpoint)]
        marker.touch()
        deadline = time.monotonic() + self.timeout
        while not saver._received and time.monotonic() < deadline:
            time.sleep(0.05)
