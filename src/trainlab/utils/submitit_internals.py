"""The one private name of submitit the project uses. Checked on submitit 1.5.x;
tests/test_library_internals.py fails when it moves."""


def requeue_signal():
    """The signal submitit sends before pre-emption (``SUBMITIT_USR_SIG``, default SIGUSR2):
    submitit's own reader of that setting is private, and parsing the variable here would
    be a second copy of its rules."""
    import submitit

    return submitit.JobEnvironment._usr_sig()
