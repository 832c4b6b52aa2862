"""Every private name of Lightning the project uses, in one place, with why no public route
serves. Checked on lightning 2.6.4 to 2.6.6; tests/test_library_internals.py fails when one
of them moves.

Classes whose private hooks the project overrides are re-exported here as bases that call
public-named methods, so a subclass elsewhere overrides ``wrap_model``, not ``_setup_model``.
"""

from lightning.fabric.strategies.launchers.subprocess_script import _launch_process_observer
from lightning.fabric.utilities.distributed import _set_num_threads_if_needed
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.callbacks.throughput_monitor import _plugin_to_compute_dtype
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.strategies.launchers import _SubprocessScriptLauncher

CHECKED_ON = ("2.6.4", "2.6.6")

SubprocessScriptLauncher = _SubprocessScriptLauncher  # the launcher of `trainer.devices=N`
launch_process_observer = _launch_process_observer  # kills the ranks if one of them dies
set_num_threads_if_needed = _set_num_threads_if_needed  # OMP threads per rank, as Lightning
compute_dtype = _plugin_to_compute_dtype  # a precision plugin's dtype: the peak to divide by
TrainingEpochLoop = _TrainingEpochLoop  # tests/test_host_syncs.py records one batch of it


def should_update_logs(trainer) -> bool:
    """Whether Lightning writes this step's logged values: its own rule (log_every_n_steps,
    counted in batches that stepped, and the last step) has no public reader."""
    return trainer._logger_connector.should_update_logs


def cluster_environment(trainer):
    """The cluster environment Lightning detected (SLURM, torchrun, ...), also for a
    one-device run, whose strategy holds none: a single-GPU SLURM job requeues too."""
    return trainer._accelerator_connector.cluster_environment


def dump_checkpoint(trainer) -> dict:
    """The full training state as ModelCheckpoint saves it, for a save outside its schedule."""
    return trainer._checkpoint_connector.dump_checkpoint(weights_only=False)


def stop_after_this_batch(trainer) -> None:
    """Lightning's own SIGTERM path: it saves nothing, stops after the batch, and on DDP the
    other ranks are told (``trainer.should_stop`` alone waits for the epoch's end there)."""
    trainer._signal_connector.received_sigterm = True


def validation_pending(trainer) -> None:
    """Mark the fit's validation as begun, so a checkpoint saved now resumes into it:
    Lightning's restart reads one started, unprocessed validation batch as "stopped mid
    validation" and runs that validation first, where a checkpoint saved just before it
    would skip it (its restart stage "on last" assumes the validation ran). No public hook
    asks a resume to validate."""
    progress = trainer.fit_loop.epoch_loop.val_loop.batch_progress
    progress.increment_ready()
    progress.increment_started()


def restore_callback_metrics(trainer, metrics: dict) -> None:
    """Put ``metrics`` back among the metrics callbacks read. ``trainer.callback_metrics`` is
    the logger connector's own dict, not a copy, and Lightning clears it when a fit starts;
    it has no setter."""
    trainer.callback_metrics.update(metrics)


def detach_trainer(module):
    """Detach ``module`` from its trainer (``module.trainer`` raises when none is attached,
    and its setter refuses None); returns what to give ``attach_trainer`` afterwards."""
    attached, module._trainer = getattr(module, "_trainer", None), None
    return attached


def attach_trainer(module, trainer) -> None:
    module._trainer = trainer


def attached_trainer(module):
    """The module's trainer, or None in a bare loop (``module.trainer`` raises there)."""
    return getattr(module, "_trainer", None)


def purge_tensorboard_from(logger: TensorBoardLogger, step: int) -> bool:
    """Have TensorBoard's writer hide the events from ``step`` on, if the writer is not made
    yet (its ``purge_step`` argument is taken only at creation); True when it will."""
    if logger._experiment is not None:
        return False
    logger._kwargs["purge_step"] = step
    return True


def launcher(strategy):
    return getattr(strategy, "_launcher", None)


def set_launcher(strategy, launcher) -> None:
    strategy._launcher = launcher


class LauncherHooks(_SubprocessScriptLauncher):
    """Lightning's script launcher with its child-starting hook under a public name."""

    def _call_children_scripts(self) -> None:
        self.call_children_scripts()

    def call_children_scripts(self) -> None:
        super()._call_children_scripts()

    def check_can_spawn_children(self) -> None:
        self._check_can_spawn_children()


class DDPStrategyHooks(DDPStrategy):
    """Lightning's DDPStrategy with its model-wrapping and comm-hook steps under public names."""

    def _setup_model(self, model):
        return self.wrap_model(model)

    def wrap_model(self, model):
        return super()._setup_model(model)

    def _register_ddp_hooks(self) -> None:
        self.register_ddp_hooks()

    def register_ddp_hooks(self) -> None:
        super()._register_ddp_hooks()

    @property
    def ddp_kwargs(self) -> dict:
        return self._ddp_kwargs


class RichProgressBarHooks(RichProgressBar):
    """Lightning's rich bar with its per-batch metrics refresh under a public name."""

    def _update_metrics(self, trainer, pl_module) -> None:
        self.update_metrics(trainer, pl_module)

    def update_metrics(self, trainer, pl_module) -> None:
        super()._update_metrics(trainer, pl_module)


class ExperimentWriterHooks(ExperimentWriter):
    """Lightning's CSV writer; its check of an existing metrics file under a public name."""

    def _check_log_dir_exists(self) -> None:
        self.check_log_dir_exists()

    def check_log_dir_exists(self) -> None:
        super()._check_log_dir_exists()


class CSVLoggerHooks(CSVLogger):
    """Lightning's CSV logger with its cached writer readable and settable by name."""

    @property
    def writer(self):
        return self._experiment

    @writer.setter
    def writer(self, writer) -> None:
        self._experiment = writer
