"""Console logging that prefixes the rank and, by default, speaks only on rank 0."""

import logging

from lightning_utilities.core.rank_zero import rank_zero_only


class RankedLogger(logging.LoggerAdapter):
    """A logger whose records read ``[rank N] message``.

    ``rank_zero_only=True`` (the default) drops records on every other rank, so a
    message is printed once per job and not once per process; pass ``rank=`` to a call
    to speak from one specific rank instead.
    """

    def __init__(self, name: str = __name__, rank_zero_only: bool = True):
        super().__init__(logging.getLogger(name), extra={})
        self.rank_zero_only = rank_zero_only

    def log(self, level, msg, *args, rank: int | None = None, **kwargs):
        if not self.isEnabledFor(level):
            return
        current = getattr(rank_zero_only, "rank", 0)
        if rank is not None and rank != current:
            return
        if rank is None and self.rank_zero_only and current != 0:
            return
        self.logger.log(level, f"[rank {current}] {msg}", *args, **kwargs)


def get_logger(name: str, rank_zero_only: bool = True) -> RankedLogger:
    return RankedLogger(name, rank_zero_only=rank_zero_only)


def one_console_line() -> None:
    """Each log line once on the console. Importing ``lightning`` gives its logger a console
    handler of its own (lightning/__init__.py), while its records also reach the root
    logger's handlers (Hydra's console and train.log), so each line printed twice. Where the
    root logger has handlers, Lightning's own console handler is removed."""
    lightning_log = logging.getLogger("lightning")
    if logging.getLogger().handlers:
        for handler in list(lightning_log.handlers):
            if type(handler) is logging.StreamHandler:
                lightning_log.removeHandler(handler)
