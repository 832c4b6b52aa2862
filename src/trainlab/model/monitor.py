"""The metric a LightningModule is judged by, for the config: ``${monitor:${model._target_}}``
and ``${monitor_mode:${model._target_}}`` read its class's ``monitor`` and ``monitor_mode``.

An OmegaConf resolver, so that checkpointing and sweeps follow whichever model is composed,
inside an experiment or not (an experiment may still state ``optimized_metric`` itself).
It reads them from the class where the class is imported already (after the full check:
what the run records and checkpoints by), else from the signature cache
(trainlab/utils/signatures.py), so resolving imports no model (torch takes seconds); a
trainlab class it holds no current entry of is imported, and any other name is refused
unimported: a config read from disk may name anything here.
"""

import sys

from omegaconf import OmegaConf

from trainlab.utils.errors import ConfigError
from trainlab.utils.signatures import known
from trainlab.utils.source import defines_class


def read(attribute: str, target: str) -> str:
    module, _, name = target.rpartition(".")
    imported = getattr(sys.modules.get(module), name, None)
    if isinstance(imported, type) and defines_class(target):
        return getattr(imported, attribute)
    entry = known(target)
    if entry is not None and attribute in entry:
        return entry[attribute]
    if not defines_class(target):
        raise ConfigError(
            f"${{{attribute}:{target}}} names no LightningModule class of trainlab: give "
            f"model._target_ a class of src/trainlab/model, or set optimized_metric yourself"
        )
    from hydra.utils import get_class

    return getattr(get_class(target), attribute)


def register() -> None:
    if not OmegaConf.has_resolver("monitor"):
        OmegaConf.register_new_resolver("monitor", lambda target: read("monitor", target))
        OmegaConf.register_new_resolver("monitor_mode", lambda t: read("monitor_mode", t))
