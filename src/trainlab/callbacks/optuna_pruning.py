"""Report ``optimized_metric`` to an Optuna trial after each validation; stop when it is pruned.

The Optuna sweeper (hparams_search=optuna) adds it to every trial as ``callbacks.trial``
(docs/parts/optuna.md). Rank 0 reports to that trial in the study's database and asks the
sweeper's pruner; the answer is broadcast, so every rank of a DDP trial stops at the same
epoch. ``pruned_at`` tells the run that it was stopped early: its summary says so, the sweeper
reads it from metrics.json.

Written here rather than taken from optuna-integration: its callback raises ``TrialPruned``
from inside ``fit`` on one process, which Lightning treats as a crash (no last.ckpt, no
metrics.json), and on several processes hands the decision back through the storage's system
attributes. Stopping the fit with ``trainer.should_stop`` is Lightning's own way, on 1 or N
ranks alike, and leaves a normal run dir behind, marked pruned by train.py.
"""

import hydra
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch import Callback, LightningModule, Trainer

from trainlab.utils.logging import get_logger

log = get_logger(__name__)


class OptunaPruning(Callback):
    def __init__(self, storage: str, study: str, id: int, monitor: str, pruner=None) -> None:
        """``pruner``: None for the sweeper's (Optuna keeps none in the study's database)."""
        self.storage, self.study, self.trial_id, self.monitor = storage, study, id, monitor
        self.pruner = pruner
        self.trial = None  # rank 0 only: opened at fit start
        self.pruned_at: int | None = None  # the epoch whose validation pruned the trial

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.is_global_zero:
            import optuna

            sweeper = HydraConfig.get().sweeper if HydraConfig.initialized() else {}
            pruner = self.pruner or hydra.utils.instantiate(sweeper.get("pruner"))
            study = optuna.load_study(study_name=self.study, storage=self.storage, pruner=pruner)
            self.trial = optuna.trial.Trial(study, self.trial_id)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        prune = False
        if self.trial is not None:
            if self.monitor not in trainer.callback_metrics:
                log.warning(f"optuna: {self.monitor} was not logged, nothing to report")
            else:
                value = float(trainer.callback_metrics[self.monitor])
                self.trial.report(value, trainer.current_epoch)
                prune = self.trial.should_prune()
        if trainer.strategy.broadcast(prune):
            self.pruned_at = trainer.current_epoch
            trainer.should_stop = True
