"""trainlab's Optuna sweeper (``hparams_search=optuna``): optuna 4, a study that persists, pruning.

Hydra finds sweepers only in the ``hydra_plugins`` package, hence this file's place. Written
here because hydra-optuna-sweeper 1.2, the last release (its main branch, unreleased, is on
optuna 4), pins optuna 2.10 and cannot prune: its trials never reach the job. This one asks Optuna for a trial, runs it as a Hydra job
(any launcher: local, with DDP, SLURM) and tells Optuna the job's result.

- The study is stored in SQLite, ``<sweep dir>/optuna.db``, with the sweep dir
  ``<studies_dir>/<study name>``. The name is derived from the command (its overrides and the
  search space), so the same command again continues the same study.
- ``n_trials`` counts the study's finished and pruned trials: a study that has them all runs
  nothing. A trial that was running when its sweep stopped resumes like a run: from its
  run dir's last.ckpt (``resume=true``) under its own number, counted once; one with no
  checkpoint yet (killed at once, machine lost) is marked failed and run again with the same
  values. A trial whose job failed stays failed.
- The sampler's random stream is moved on by the study's history (``reseed``): Optuna's
  samplers restart it in every process, so a re-run study drew its first trials' values
  again (trial 3 repeated trial 0 exactly).
- Each trial's run dir is ``<sweep dir>/<trial number>``. The job gets its pruning callback
  as ``callbacks.trial`` (trainlab.callbacks.optuna_pruning: the study, the trial, the
  monitor); a trial it stopped says so in its metrics.json, which ``tell`` reads.
"""

from __future__ import annotations  # optuna's types in annotations, unimported

import hashlib
import json
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf, read_write

from trainlab.checks.config import check_types
from trainlab.utils.errors import ConfigError
from trainlab.utils.optuna_internals import trial_id
from trainlab.utils.ranges import Count

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)
# optuna is imported where a study runs, not here: Hydra imports every plugin module at the
# start of each command, and optuna's import (0.2 s) would delay every one-line refusal.


def distribution(override: Override):
    """``interval(a, b)`` (``tag(log, interval(a, b))`` on a log scale), ``choice(...)`` or
    ``range(...)`` as an Optuna distribution. Choices stay override strings."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if override.is_interval_sweep():
        sweep = override.value()
        if not sweep.start < sweep.end:
            raise ConfigError(
                f"{override.input_line}: the interval is empty; give interval(low, high) "
                "with low < high"
            )
        if "log" in sweep.tags and sweep.start <= 0:
            raise ConfigError(
                f"{override.input_line}: a log interval needs low > 0; give a positive low"
            )
        if isinstance(sweep.start, int) and isinstance(sweep.end, int):
            return IntDistribution(sweep.start, sweep.end, log="log" in sweep.tags)
        return FloatDistribution(sweep.start, sweep.end, log="log" in sweep.tags)
    if override.is_choice_sweep() or override.is_range_sweep():
        return CategoricalDistribution(list(override.sweep_string_iterator()))
    raise ConfigError(
        f"{override.input_line}: Optuna searches interval(a,b), choice(...) or range(...)"
    )


def study_name(fixed: list[str], space: dict) -> str:
    """``optuna_<8 hex>`` from the command's overrides and the search space, in any order."""
    text = "\n".join(sorted(fixed) + sorted(f"{k}: {d!r}" for k, d in space.items()))
    return "optuna_" + hashlib.sha1(text.encode()).hexdigest()[:8]


def reseed(sampler, name: str, trials: int) -> None:
    """Seed ``sampler``'s random streams from the study's name and trial count: the same
    history gives the same next values (reproducible), a longer one new values. Optuna's own
    ``reseed_rng`` draws from the OS: no repeats, but no reproducible sweep either."""
    seed = int(hashlib.sha1(f"{name}:{trials}".encode()).hexdigest()[:8], 16)
    for part in (sampler, getattr(sampler, "_random_sampler", None)):
        rng = getattr(getattr(part, "_rng", None), "rng", None)  # numpy RandomState
        if rng is not None:
            rng.seed(seed)


def stopped_with_checkpoint(run_dir: Path) -> bool:
    """A trial's run dir that a stop left resumable: a last.ckpt, no metrics.json."""
    return (run_dir / "checkpoints" / "last.ckpt").is_file() and not (
        run_dir / "metrics.json"
    ).exists()


class OptunaSweeper(Sweeper):
    continues_its_dir = True  # the same command continues its study in its sweep dir

    def __init__(
        self,
        params: dict,
        direction: Literal["minimize", "maximize", "min", "max"],
        n_trials: Count,
        n_jobs: Count,
        sampler,
        pruner,
        studies_dir: str,
        study_name: str | None = None,
        storage: str | None = None,
    ) -> None:
        # Hydra builds the sweeper from hydra.sweeper, a node the run's config check does not
        # read: the same signature check here, before the first trial or study file.
        values = {"direction": direction, "n_trials": n_trials, "n_jobs": n_jobs}
        node = OmegaConf.create({"_target_": f"{__name__}.OptunaSweeper", **values})
        check_types(node, "hydra.sweeper")
        self.params = dict(params or {})
        self.direction = {"max": "maximize", "min": "minimize"}.get(direction, direction)
        self.n_trials, self.n_jobs = n_trials, n_jobs
        self.sampler, self.pruner = sampler, pruner
        self.studies_dir, self.study_name, self.storage = studies_dir, study_name, storage

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> None:
        import optuna
        from optuna.trial import TrialState

        parser = OverridesParser.create()
        searched = parser.parse_overrides([f"{k}={v}" for k, v in self.params.items()])
        given = parser.parse_overrides(arguments)  # a=1,2 on the command line: searched too
        space = {o.key_or_group: distribution(o) for o in searched + given if o.is_sweep_override()}
        fixed = [o.input_line for o in given if not o.is_sweep_override()]
        name = self.study_name or study_name(fixed, space)
        sweep_dir = Path(self.studies_dir) / name
        sweep_dir.mkdir(parents=True, exist_ok=True)
        with read_write(self.config.hydra):  # the launcher and the sweep summary read it
            self.config.hydra.sweep.dir = str(sweep_dir)
        storage = self.storage or f"sqlite:///{sweep_dir.resolve() / 'optuna.db'}"
        study = optuna.create_study(
            study_name=name,
            storage=storage,
            sampler=self.sampler,
            pruner=self.pruner,
            direction=self.direction,
            load_if_exists=True,
        )
        if study.trials and self.sampler is not None:
            reseed(self.sampler, name, len(study.trials))
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if stopped_with_checkpoint(sweep_dir / str(trial.number)):
                log.warning(f"trial {trial.number} was stopped: it resumes from its last.ckpt")
                job = [
                    *fixed,
                    *self.trial_overrides(trial, storage, name, sweep_dir),
                    "resume=true",
                ]
                self.run_jobs(study, [trial], [job])
                continue
            study.tell(trial.number, state=TrialState.FAIL)
            study.enqueue_trial(trial.params)
            log.warning(f"trial {trial.number} was interrupted: marked failed, it runs again")
        done = len(
            study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        )
        log.info(f"Optuna study {name} ({storage}): {done} of {self.n_trials} trials done")
        todo = max(0, self.n_trials - done)
        while todo:
            batch = [study.ask(space) for _ in range(min(self.n_jobs, todo))]
            todo -= len(batch)
            jobs = [[*fixed, *self.trial_overrides(t, storage, name, sweep_dir)] for t in batch]
            self.run_jobs(study, batch, jobs)
        if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            best = study.best_trial
            log.info(f"best trial: {best.number} value {best.value:.4g} params {best.params}")

    def run_jobs(self, study: optuna.Study, trials: list, jobs: list[list[str]]) -> None:
        """Launch one job per trial and tell Optuna each result. A job that exits (a user
        error, a signal) ends the sweep: its trials fail, except those a stop left
        resumable, which stay running and resume when the sweep is run again."""
        from optuna.trial import TrialState

        sweep_dir = Path(self.config.hydra.sweep.dir)
        try:  # run dirs are named by trial number: one batch asks consecutive numbers
            returns = self.launcher.launch(jobs, initial_job_idx=trials[0].number)
        except BaseException as stop:
            signalled = isinstance(stop, SystemExit) and stop.code in (
                128 + signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGUSR1
            )  # fmt: skip
            for trial in trials:
                if not (signalled and stopped_with_checkpoint(sweep_dir / str(trial.number))):
                    study.tell(trial.number, state=TrialState.FAIL)
            raise
        for trial, ret in zip(trials, returns, strict=True):
            tell(study, trial.number, ret, sweep_dir / str(trial.number))

    @staticmethod
    def trial_overrides(trial, storage: str, name: str, sweep_dir: Path) -> list[str]:
        values = [f"{k}={v}" for k, v in trial.params.items()]
        pruning = (
            "{_target_:trainlab.callbacks.optuna_pruning.OptunaPruning,"
            f"storage:'{storage}',study:'{name}',id:{trial_id(trial)},"
            "monitor:'${optimized_metric}'}"
        )
        return [*values, f"+callbacks.trial={pruning}", f"hydra.sweep.dir='{sweep_dir}'"]


def tell(study: optuna.Study, number: int, ret: JobReturn, run_dir: Path) -> None:
    """Pruned (its metrics.json says so), completed with a number, or failed."""
    from optuna.trial import TrialState

    if ret.status == JobStatus.COMPLETED and pruned(run_dir):
        study.tell(number, state=TrialState.PRUNED)
        return
    if ret.status == JobStatus.COMPLETED and ret.return_value is not None:
        study.tell(number, float(ret.return_value))
        return
    try:
        ret.return_value  # noqa: B018 (re-raises the job's exception)
        log.warning(f"trial {number}: the job returned no optimized_metric; marked failed")
    except Exception as e:
        log.warning(f"trial {number} failed: {type(e).__name__}: {e}")
    study.tell(number, state=TrialState.FAIL)


def pruned(run_dir: Path) -> bool:
    """Whether the trial's run summary says its pruning callback stopped it."""
    path = run_dir / "metrics.json"
    return path.is_file() and "pruned" in json.loads(path.read_text())
