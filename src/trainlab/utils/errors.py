"""Errors a user can fix. The entry points print them as one line and exit non-zero."""

import errno


class UserError(Exception):
    """Something in the user's config, data or command line is wrong; the message says how to fix it."""

    exit_code = 2


class ConfigError(UserError):
    """The composed config is inconsistent or has a value of the wrong type."""


class DataError(UserError):
    """A dataset is missing, empty or unreadable."""


class StorageError(UserError):
    """The disk refuses a write: full, over quota or read-only."""


# The errors of a disk, not of the program: what the user must change is where runs go.
# Not EACCES/EPERM: those also come from reading data, where "cannot write" would mislead.
STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)


def storage_error(e: BaseException) -> StorageError | None:
    """A StorageError naming the path and the fix, when e is a disk refusing a write."""
    if not isinstance(e, OSError) or e.errno not in STORAGE_ERRNOS:
        return None
    path = e.filename2 or e.filename or "the run dir"  # filename2: the target of a move
    fix = (
        "raise the shell's file-size limit (ulimit -f) or the file system's"
        if e.errno == errno.EFBIG
        else "free space there or make it writable"
    )
    return StorageError(
        f"cannot write {path}: {e.strerror}; {fix}, or set paths.log_dir to another disk "
        "(runs and checkpoints already there are unchanged)"
    )


def one_line(exc: BaseException) -> str:
    """An exception's message on one line: a UserError's whole (its lines joined: a cause
    quoted inside it may span lines), any other's last line.

    DataLoader workers re-raise their exception in the main process with the worker's whole
    traceback as the message; the user's fix is in its last line.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if isinstance(exc, UserError) and not any(line.startswith("Traceback") for line in lines):
        return " ".join(lines)
    last = lines[-1] if lines else type(exc).__name__
    name = type(exc).__name__
    # A worker's traceback ends in "module.ClassName: message".
    for prefix in (f"{type(exc).__module__}.{name}: ", f"{name}: "):
        if last.startswith(prefix):
            last = last[len(prefix) :]
    return last
