"""The one private name of optuna the project uses. Checked on optuna 4.9.0;
tests/test_library_internals.py fails when it moves."""


def trial_id(trial) -> int:
    """The storage's key of a trial: what ``optuna.trial.Trial(study, trial_id)`` (public)
    needs to re-open it in the job's process. Optuna exposes the trial's number, not its id."""
    return trial._trial_id
