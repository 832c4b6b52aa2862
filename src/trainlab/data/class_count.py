"""``data.num_classes`` read from the data itself: a ``classes.json`` in ``data.root`` (a list
of class names), else the class folders under its train/.

An OmegaConf resolver, not a data-module method, because the model's head is built from
the same value (``${data.num_classes}``) before any data module exists. Registered when
trainlab is imported; ``data.num_classes=<n>`` on the command line still overrides it.
"""

import json
from pathlib import Path

from omegaconf import OmegaConf

from trainlab.utils.errors import DataError


def count_classes(root: str) -> int:
    if "://" in str(root):
        raise DataError(
            f"the classes of {root} are not counted remotely: add data.num_classes=<number of "
            "classes> (the length of its classes.json)"
        )
    listed = Path(root) / "classes.json"
    if listed.is_file():
        return len(json.loads(listed.read_text()))
    train = Path(root) / "train"
    if not train.is_dir():
        raise DataError(
            f"no {train} folder (or {listed}) to count the classes from: set data.root to the "
            "folder that holds train/<class>/ and val/<class>/, or give data.num_classes"
        )
    return sum(1 for entry in train.iterdir() if entry.is_dir())


def register() -> None:
    if not OmegaConf.has_resolver("count_classes"):
        OmegaConf.register_new_resolver("count_classes", count_classes)
