"""What a path the project reads is, before it is opened: a FIFO blocks whoever reads it
until someone writes, a device may never end, a directory cannot be loaded."""

import stat
from pathlib import Path


def not_a_file(path: str | Path) -> str | None:
    """None for a regular file (or a link to one); else what it is, in words that follow
    the path in a message: "does not exist", "is a directory", "is a FIFO, a socket or a
    device, not a file"."""
    try:
        mode = Path(path).stat().st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    return "is a FIFO, a socket or a device, not a file"


def home_path(key: str, value: object) -> str | None:
    """The fix for a path that starts with ~ (home), which nothing expands: the shell expands
    ~ only at the start of a word, not after ``key=``, and Hydra and Python read it as a name.
    None for any other value."""
    if not (isinstance(value, str) and (value == "~" or value.startswith("~/"))):
        return None
    return (
        f"{key}={value}: ~ is not expanded after {key}= (the shell expands it only at the start "
        f"of a word); write {key}=$HOME{value[1:]}"
    )
