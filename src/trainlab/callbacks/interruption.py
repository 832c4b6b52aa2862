"""Checkpoints where a run stopped: last.ckpt on SIGTERM / SIGUSR1 / Ctrl-C, on_exception.ckpt
on an error.

SIGTERM stops training at the same batch on every rank with a SIGTERMException, and
Lightning calls ``on_exception``; here that saves last.ckpt, which ``resume=true``
continues from. SIGUSR1 (the usual pre-emption notice, ``sbatch --signal=SIGUSR1@90``) is
routed to the same path; in a SLURM batch job, rank 0 then requeues the job (``scontrol
requeue``) and the requeued job resumes from last.ckpt. Lightning's own SLURM handler is
turned off: it would save a second, full checkpoint (``hpc_ckpt_N.ckpt``) that resume never
reads, with a collective inside the signal handler. The first Ctrl-C (SIGINT) takes the
same path: Lightning would otherwise stop at once, keeping only the last epoch's last.ckpt;
a second Ctrl-C stops at once, as Python would. A launcher's own pre-emption signal joins
these in a subclass it chooses by config (``callbacks.interruption._target_``).

Lightning's SIGTERM handler broadcasts from inside the handler, which runs wherever the
signal lands, possibly inside another collective, and each rank then stops at its own
next batch: 2 gloo ranks deadlocked here. So the handler here only notes the signal, and
the ranks agree at the start of each training batch and at the epoch's end (one all-reduce
of a flag) before Lightning's stop flag is set on all of them at once; they stop after
that batch, or at the start of a validation that would follow it. The agreement is a
collective and a host sync, so with several ranks it runs every ``agree_every_n_batches``
batches and at the start of each validation, not every batch: a signal then stops the run
within that many batches (one process needs no agreement and stops after the current batch).
A stop agreed where a validation starts is saved as that validation begun, so the resume runs
it (and the epoch's end) before training on: the epoch keeps its validation and its mean.
Every checkpoint also keeps what the run had logged (``trainer.callback_metrics``), put back
when the resumed fit starts: that validation's checkpoint, early stopping or pruner then
reads a metric logged in training (the learning rate) as the uninterrupted run would.

On any other exception Lightning's OnExceptionCheckpoint calls ``trainer.save_checkpoint``,
whose barrier waits for every rank: when one rank fails alone, it hangs until the process
group times out. Here the failing rank writes its own state without any collective, and
nothing where no step ran (a data error before the first batch): such a file would hold the
untrained initial weights under a name that reads like a result.
"""

import os
import signal
import subprocess
from pathlib import Path

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.strategies import ModelParallelStrategy
from lightning.pytorch.utilities.exceptions import SIGTERMException

from trainlab.utils import lightning_internals
from trainlab.utils.errors import DataError
from trainlab.utils.logging import get_logger
from trainlab.utils.ranges import Count

log = get_logger(__name__)


def peer_lost(exception: BaseException) -> bool:
    """A collective failed because another rank is gone: torch's DistError, or gloo's
    RuntimeError for a closed or reset connection."""
    text = str(exception)
    return isinstance(exception, dist.DistError) or (
        isinstance(exception, RuntimeError)
        and any(m in text for m in ("Connection closed by peer", "Connection reset by peer"))
    )


def slurm_batch_job() -> bool:
    """In a SLURM batch job (sbatch), not an interactive one (``srun --job-name=bash``)."""
    return SLURMEnvironment.job_id() is not None


def requeue_slurm_job(ask: bool) -> bool:
    """After the save, in a SLURM batch job (else False): one task (``ask``) asks SLURM to
    requeue the job, and SLURM then stops every task with SIGTERM, which they ignore: they
    are exiting anyway."""
    if not slurm_batch_job():
        return False
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if not ask:
        return True
    job = os.environ["SLURM_JOB_ID"]
    if os.environ.get("SLURM_ARRAY_JOB_ID"):  # an array task's own id
        job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    if done.returncode != 0:
        log.warning(f"scontrol requeue {job} failed: {done.stderr.strip()}")
    return True


class InterruptionCheckpoint(L.Callback):
    def __init__(self, dirpath: str, agree_every_n_batches: Count = 10):
        self.dirpath = Path(dirpath)
        self.agree_every_n_batches = agree_every_n_batches
        self.signal: signal.Signals | None = None  # the signal that stopped the run, if one did
        self._previous: dict[signal.Signals, object] = {}  # handlers to restore at the end
        self._received = False  # a stop signal reached this process, not yet agreed on
        self.stopped_at_once = False  # a second Ctrl-C: no checkpoint, exit 130
        self._logged: dict[str, torch.Tensor] = {}  # the resumed checkpoint's logged metrics

    # -- signals ---------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module, stage: str) -> None:
        # Before the fit registers Lightning's handlers: under SLURM, this callback's alone.
        env = lightning_internals.cluster_environment(trainer)
        if isinstance(env, SLURMEnvironment):
            env.auto_requeue = False

    def on_train_start(self, trainer: L.Trainer, pl_module) -> None:
        lightning_internals.restore_callback_metrics(trainer, self._logged)
        self._logged = {}
        # After Lightning registered its handlers: it restores what it found at the end.
        self.signal, self._received, self.stopped_at_once = None, False, False
        # Replaces Lightning's handler; Lightning restores the original one at teardown.
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, self._on_sigusr1)
        self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigterm(self, signum, frame) -> None:
        self._received = True  # no collective here: see the module docstring
        log.info(f"received {signal.Signals(signum).name}: stopping at the next batch")

    def _on_sigusr1(self, signum, frame) -> None:
        self.signal = signal.SIGUSR1
        self._on_sigterm(signum, frame)

    def _on_sigint(self, signum, frame) -> None:
        if self._received:  # the second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.signal = signal.SIGINT
        self._on_sigterm(signum, frame)
        log.info("Ctrl-C: saving last.ckpt after this batch (Ctrl-C again stops at once)")

    @property
    def requeues(self) -> str | None:
        """Who requeues the job after this stop: SLURM, on SIGUSR1 in a batch job (not an
        interactive ``srun``); None otherwise."""
        return "SLURM" if self.signal == signal.SIGUSR1 and slurm_batch_job() else None

    def requeue(self, trainer: L.Trainer) -> None:
        """After the save, under SLURM: rank 0 asks for the requeue, and SLURM stops every
        rank of this job."""
        if self.requeues == "SLURM":
            requeue_slurm_job(ask=trainer.is_global_zero)

    def _agree_to_stop(self, trainer: L.Trainer) -> None:
        """Every rank calls this at the same point: stop if a signal reached any rank."""
        received = self._received
        if trainer.world_size > 1:  # one process needs no agreement (nor a device sync)
            flag = torch.tensor(float(received), device=trainer.strategy.root_device)
            received = trainer.strategy.reduce(flag, reduce_op="max").item() > 0
        if received:
            lightning_internals.stop_after_this_batch(trainer)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module, batch, batch_idx) -> None:
        if trainer.world_size == 1 or batch_idx % self.agree_every_n_batches == 0:
            self._agree_to_stop(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module) -> None:
        self._agree_to_stop(trainer)  # a signal during the epoch's last validation

    def on_validation_start(self, trainer: L.Trainer, pl_module) -> None:
        # Lightning ends validation at each rank's next batch once the stop flag is set, but
        # ranks may hold different numbers of validation batches (a sharded stream reads whole
        # chunks): one rank would stop while another waits in the metric sync. So a
        # training stop happens here, on every rank at once, agreed on here too: every rank
        # reaches a validation at the same step, and validations are rare.
        if trainer.state.fn == "fit":
            self._agree_to_stop(trainer)
            if trainer.received_sigterm:
                # The checkpoint then resumes into this validation, so a stop in an epoch's
                # last batch still leads to that epoch's validation and epoch end.
                lightning_internals.validation_pending(trainer)
                raise SIGTERMException

    # -- the final test -------------------------------------------------------------------
    def on_test_start(self, trainer: L.Trainer, pl_module) -> None:
        """A signal during the test stops it at the next batch (SIGTERMException, which
        train.py reports with what is saved), instead of killing the process silently."""
        self.signal, self._received = None, False
        for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._on_test_signal)

    def _on_test_signal(self, signum, frame) -> None:
        self.signal, self._received = signal.Signals(signum), True
        log.info(f"received {self.signal.name}: stopping the test at the next batch")

    def on_test_batch_start(self, trainer: L.Trainer, pl_module, batch, batch_idx, *_) -> None:
        if self._received:
            raise SIGTERMException

    def _restore_handlers(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def teardown(self, trainer: L.Trainer, pl_module, stage: str) -> None:
        self._restore_handlers()

    # -- saving ----------------------------------------------------------------------------
    def on_save_checkpoint(self, trainer: L.Trainer, pl_module, checkpoint: dict) -> None:
        checkpoint["callback_metrics"] = {
            name: value.detach().cpu()
            for name, value in trainer.callback_metrics.items()
            if isinstance(value, torch.Tensor)
        }

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module, checkpoint: dict) -> None:
        self._logged = checkpoint.get("callback_metrics", {})

    def on_exception(self, trainer: L.Trainer, pl_module, exception: BaseException) -> None:
        self._restore_handlers()  # Lightning calls no teardown hook after an exception
        if isinstance(exception, KeyboardInterrupt):  # the second Ctrl-C: stop at once
            self.stopped_at_once = True  # the run then exits 130 (run/fit.py)
            log.info("stopped at once by a second Ctrl-C: nothing saved over the checkpoints")
            return
        if isinstance(exception, SIGTERMException):
            self.signal = self.signal or signal.SIGTERM
            if trainer.state.fn == "fit":  # during test the model holds the best weights
                # Every rank is here at the same batch: a normal, collective save.
                trainer.save_checkpoint(self.dirpath / "last.ckpt", weights_only=False)
            return
        if isinstance(trainer.strategy, ModelParallelStrategy):
            log.warning(
                "no on_exception checkpoint under FSDP: saving sharded state needs every rank"
            )
            return
        if trainer.global_step == 0:
            log.info("no on_exception checkpoint: the run stopped before its first step")
            return
        if isinstance(exception, FloatingPointError):  # NonFiniteGuard: weights not finite
            log.info("no on_exception checkpoint: the weights are no longer finite")
            return
        if isinstance(exception, DataError):  # a bad file: the fixed data reruns cleanly
            log.info("no on_exception checkpoint: a data error, not a training state to keep")
            return
        if peer_lost(exception):  # another rank died: this one's state is mid-collective
            log.info("no on_exception checkpoint: another rank stopped; resume=true continues")
            return
        rank = trainer.global_rank
        path = self.dirpath / (
            "on_exception.ckpt" if rank == 0 else f"on_exception.rank{rank}.ckpt"
        )
        # dump_checkpoint gathers nothing across ranks under DDP (each holds the full state).
        checkpoint = lightning_internals.dump_checkpoint(trainer)
        try:
            trainer.strategy.checkpoint_io.save_checkpoint(checkpoint, path)
        except OSError as error:  # a full disk: the error that stopped the run is the news
            log.warning(f"could not save the state at the error to {path}: {error}")
            return
        log.info(f"saved the state at the error to {path}")
