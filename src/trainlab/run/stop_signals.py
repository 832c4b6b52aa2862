"""Stop signals where no training step runs: before the fit starts, between its stages, and
during the end-of-run table. Python's defaults end the process there silently (SIGTERM,
SIGUSR1) or with a traceback (Ctrl-C). Here each raises ``Stopped``, which the phase that
catches it turns into one line and exit 128 + the signal. During the fit
callbacks/interruption.py handles them: it saves last.ckpt.
"""

import signal
import threading
from contextlib import contextmanager

# SIGTERM goes in last: once a process catches it, every stop handler is in place.
STOPS = (signal.SIGINT, signal.SIGUSR1, signal.SIGTERM)


class Stopped(BaseException):  # not caught by an `except Exception` on its way out
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signal.Signals(signum)


def _stop(signum, frame) -> None:
    raise Stopped(signum)


@contextmanager
def signals_raise_stopped():
    """While inside, SIGTERM, SIGUSR1 and Ctrl-C raise ``Stopped``; the handlers found are
    restored on the way out. Signal handlers belong to the main thread: elsewhere, nothing."""
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, _stop) for s in STOPS} if main else {}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
