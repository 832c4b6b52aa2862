"""Hydra's basic sweeper, with every job's config checked before the first job runs.

Hydra's own sweeper composes the jobs and then runs them in order, so a bad value in the
last job was found only after the others had trained, and the jobs after it never ran. Here
each job's config gets the config checks first (the types of its overrides, its values
against its classes' signatures, its place): one refused job refuses the sweep in one line
naming the job and the key, before any job runs or any sweep dir is made. A warning that
several jobs give is said once then; each job says its own again as it runs.

``hydra.sweeper.keep_going=true`` runs the valid jobs instead, one at a time, through any
failure, and writes the refused and failed jobs to the sweep dir's ``not_finished.json``
(the run tables part lists them in the sweep's summary.csv). Such a sweep ends with one
line and exit 2 (jobs refused) or 1 (a job failed): ``SweepStatus``, a Hydra callback run
after the others.
"""

import contextlib
import io
import json
import logging
import shutil
import sys
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import OmegaConf, open_dict

from trainlab.checks.config import check_config
from trainlab.checks.override_types import check_override_types
from trainlab.checks.placement import check_name, place_job
from trainlab.run.run_dir import remove_if_empty
from trainlab.utils.errors import ConfigError, UserError, one_line
from trainlab.utils.hydra_internals import BasicSweeperHooks

NOT_FINISHED = "not_finished.json"  # in the sweep dir: jobs refused or failed, for the summary


def check_job(sweep_config, overrides: list[str], config_loader, number: int) -> Path:
    """The checks that need no data, on one job's composed config; returns the job's dir
    (job ``number`` of the sweep), placed like a single run's."""
    config = config_loader.load_sweep_config(sweep_config, list(overrides))
    job_dir = place_job(config, number)
    task = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
    with open_dict(task):
        task.paths.output_dir = task.paths.log_dir  # only the run knows its dir
    check_name("task_name", task.get("task_name"))
    check_override_types(task, sweep_config.hydra.job.config_name, list(overrides))
    check_config(task, list(overrides))  # its classes' signatures too: imports them
    return job_dir


def last_error(job_dir: Path) -> str | None:
    """The line that says why a job stopped: run_task's ``error: ...`` line, or the last
    line of the traceback, in the job's log (train.log)."""
    log = job_dir / "train.log"
    if not log.is_file():
        return None
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    said = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    raised = [
        line for line in lines if line and line.split(":")[0].endswith(("Error", "Exception"))
    ]
    return (said or raised or [None])[-1]


@contextlib.contextmanager
def each_line_once():
    """While the jobs are checked, the console's handlers let each message through once."""
    seen = set()

    def first_time(record: logging.LogRecord) -> bool:
        new = record.getMessage() not in seen
        seen.add(record.getMessage())
        return new

    handlers = logging.getLogger().handlers
    for handler in handlers:
        handler.addFilter(first_time)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(first_time)


@contextlib.contextmanager
def sbatch_refusals(launcher, sweep_dir: Path, log_dir: Path):
    """Under launcher=slurm, a job SLURM refuses leaves nothing: submitit's copy of sbatch's
    message is held back (train.py prints it in its one line) and its submission files and
    the sweep dir made for them are removed."""
    if type(launcher).__name__ != "SlurmLauncher":
        yield
        return
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            yield
    except RuntimeError as error:
        if "sbatch: error" not in str(error):
            raise
        shutil.rmtree(sweep_dir / ".submitit", ignore_errors=True)
        (sweep_dir / "multirun.yaml").unlink(missing_ok=True)
        remove_if_empty(sweep_dir, log_dir)
        raise
    finally:
        if "sbatch: error" not in held.getvalue():
            sys.stderr.write(held.getvalue())


class CheckedSweeper(BasicSweeperHooks):
    def __init__(self, max_batch_size=None, params=None, keep_going: bool = False) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.keep_going = keep_going

    def sweep(self, arguments: list[str]):
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        parsed = parser.parse_overrides([*self.sweep_params_overrides(), *arguments])
        jobs = [job for batch in self.split_arguments(parsed, None) for job in batch]
        with each_line_once():
            refused = self.check_jobs(jobs)
        sweep_dir, log_dir = Path(self.config.hydra.sweep.dir), Path(self.config.paths.log_dir)
        with sbatch_refusals(self.launcher, sweep_dir, log_dir):
            if not self.keep_going:
                return super().sweep(arguments)
            return self.run_through(jobs, refused)

    def check_jobs(self, jobs: list[list[str]]) -> dict[int, str]:
        """Every job's checks: the refused jobs' reasons; the first refusal ends the sweep
        unless it keeps going."""
        refused, dirs = {}, {}
        for number, job in enumerate(jobs):
            try:
                # Hydra numbers the jobs it launches: under keep_going, the valid ones only
                num = number - len(refused) if self.keep_going else number
                place = check_job(self.config, job, self.hydra_context.config_loader, num)
                if place in dirs:
                    raise ConfigError(
                        f"hydra.sweep.subdir gives jobs {dirs[place]} and {number} one dir "
                        f"({place}): each job needs its own; use ${{hydra.job.num}} in it"
                    )
                dirs[place] = number
            except UserError as error:
                refused[number] = one_line(error)
                if not self.keep_going:
                    swept = [o for o in job if not all(o in other for other in jobs)] or job
                    print(
                        f"error: job {number} of {len(jobs)} ({' '.join(swept)}): "
                        f"{refused[number]}; no job ran (hydra.sweeper.keep_going=true runs "
                        "the others and lists this one)",
                        file=sys.stderr,
                        flush=True,
                    )
                    sys.exit(error.exit_code)
        return refused

    def run_through(self, jobs: list[list[str]], refused: dict[int, str]):
        """Each valid job on its own, whatever the others did; the refused and failed ones
        recorded for the summary."""
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        not_finished = [
            {"job": "-", "overrides": jobs[n], "status": "refused", "reason": why}
            for n, why in refused.items()
        ]
        returns, number = [], 0
        for i, job in enumerate(jobs):
            if i in refused:
                continue
            try:
                returns.append(self.launcher.launch([job], initial_job_idx=number))
            except SystemExit as stop:  # run_task's exit: 2 refused, else failed
                status = "refused" if stop.code == UserError.exit_code else "failed"
                reason = last_error(sweep_dir / str(number)) or "see its log"
                not_finished.append(
                    {"job": str(number), "overrides": job, "status": status, "reason": reason}
                )
            number += 1
        (sweep_dir / NOT_FINISHED).write_text(json.dumps(not_finished, indent=1) + "\n")
        return returns


class SweepStatus(Callback):
    """A ``keep_going`` sweep that refused or lost a job did not succeed: one line, exit 2
    (refused only) or 1 (a job failed). Hydra calls end hooks last-listed first, so a
    summary listed after this callback is written before the exit."""

    def on_multirun_end(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        path = sweep_dir / NOT_FINISHED
        entries = json.loads(path.read_text()) if path.is_file() else []
        if not entries:
            return
        failed = sum(entry["status"] == "failed" for entry in entries)
        finished = len(list(sweep_dir.glob("*/metrics.json")))
        print(
            f"error: {failed} job(s) failed and {len(entries) - failed} were refused of "
            f"{finished + len(entries)} (each with its reason in {path})",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(1 if failed else UserError.exit_code)
