"""The metric a LightningModule is judged by, for the config: ``${monitor:${model._target_}}``
and ``${monitor_mode:${model._target_}}`` read its class's ``monitor`` and ``monitor_mode``.

An OmegaConf resolver, so that checkpointing and sweeps follow whichever model is composed,
inside an experiment or not (an experiment may still state ``optimized_metric`` itself).
"""

from hydra.utils import get_class
from omegaconf import OmegaConf


def register() -> None:
    if not OmegaConf.has_resolver("monitor"):
        OmegaConf.register_new_resolver("monitor", lambda target: get_class(target).monitor)
        OmegaConf.register_new_resolver(
            "monitor_mode", lambda target: get_class(target).monitor_mode
        )
