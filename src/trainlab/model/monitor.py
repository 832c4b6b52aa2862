"""The metric a LightningModule is judged by, for the config:
``${monitor:${model._target_},${data._target_}}`` and ``${monitor_mode:...}`` read its class's
``monitor`` and ``monitor_mode``; on data without labels (a data class that writes
``labels = "none"``: data=folder), its ``unlabelled_monitor`` and ``unlabelled_monitor_mode``
where it has them (a self-supervised method: RankMe, which needs no labels).

An OmegaConf resolver, so that checkpointing and sweeps follow whichever model is composed,
inside an experiment or not (an experiment may still state ``optimized_metric`` itself).
Composing a config resolves it already (OmegaConf's merge reads the value an experiment's
``optimized_metric`` replaces), before torch is imported: so it reads the string the class
writes in its source (utils/source.py), and imports the class only where none is written
there. A config read from disk may name anything here: a name that is not a class of
trainlab is refused unimported.
"""

from omegaconf import OmegaConf

from trainlab.utils.errors import ConfigError
from trainlab.utils.source import class_string, defines_class


def read(attribute: str, target: str, data: str = "") -> str:
    if data and defines_class(data) and class_string(data, "labels") == "none":
        if (written := class_string(target, f"unlabelled_{attribute}")) is not None:
            return written
    if not defines_class(target):
        raise ConfigError(
            f"${{{attribute}:{target}}} names no LightningModule class of trainlab: give "
            f"model._target_ a class of src/trainlab/model, or set optimized_metric yourself"
        )
    if (written := class_string(target, attribute)) is not None:
        return written
    from hydra.utils import get_class

    return getattr(get_class(target), attribute)


def register() -> None:
    if not OmegaConf.has_resolver("monitor"):
        OmegaConf.register_new_resolver("monitor", lambda t, d="": read("monitor", t, d))
        OmegaConf.register_new_resolver("monitor_mode", lambda t, d="": read("monitor_mode", t, d))
