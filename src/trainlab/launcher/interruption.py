"""InterruptionCheckpoint in a submitit job, which both submitit launchers choose
(``callbacks.interruption`` in configs/launcher/slurm.yaml and submitit_local.yaml).

submitit's pre-emption signal (SIGUSR2, SLURM's ``--signal``; ``SUBMITIT_USR_SIG`` names
another) takes the path of SIGUSR1: every rank saves last.ckpt at the same batch. Only then
does submitit's own handler run (``requeue``): it requeues the job, which resumes from that
checkpoint. Left alone, that handler would requeue at once, before anything is saved.
"""

import os
import signal

import lightning as L

from trainlab.callbacks.interruption import InterruptionCheckpoint
from trainlab.utils import submitit_internals


class SubmititInterruption(InterruptionCheckpoint):
    _submitit: tuple[signal.Signals, object] | None = None  # its signal and submitit's handler

    def on_train_start(self, trainer: L.Trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        if os.environ.get("SUBMITIT_EXECUTOR"):  # a job, not a single run of this config
            usr = submitit_internals.requeue_signal()
            self._previous[usr] = signal.signal(usr, self._on_submitit_signal)
            self._submitit = (usr, self._previous[usr])

    def _on_submitit_signal(self, signum, frame) -> None:
        self.signal = signal.Signals(signum)
        self._on_sigterm(signum, frame)

    @property
    def requeues(self) -> str | None:
        """In a submitit job: submitit after its own signal, nobody after any other; in any
        other run, the core's answer (SLURM after SIGUSR1 in a batch job)."""
        if self._submitit is None:
            return super().requeues
        return "submitit" if self.signal == self._submitit[0] else None

    def requeue(self, trainer: L.Trainer) -> None:
        """After the save: submitit's handler resubmits the job (on rank 0) and exits."""
        if self.requeues != "submitit":
            return super().requeue(trainer)
        signum, handler = self._submitit
        # SLURM's SIGTERM for the requeue, as in requeue_slurm_job: this process is exiting,
        # and submitit logs the requeue and exits once scontrol returns.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        handler(signum, None)
