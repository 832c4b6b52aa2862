"""What a copied run's config may give the command that reads it (``eval.py``,
``model.init_from``): the network's architecture and the data's format, and nothing that
reaches outside the process.

``allowed_targets`` already refuses code that configs/ do not name; these rules refuse the
allowed classes used against the reader: a download (``download``, ``pretrained``,
``weights``), an endpoint or a cache folder that would receive the user's credentials or
files, a remote data root, arguments given positionally (``_args_``, which no config of
this project writes), and a nested ``_target_`` in an encoder that is not one of trainlab's
own building blocks (``zz: {_target_: torchvision.models.resnet50, pretrained: true}``
would be built and handed to the encoder as an extra keyword). Where the run's data lived
on a server or in a cache of its own, the command line names it, in one line.
"""

from omegaconf import DictConfig, ListConfig, OmegaConf

from trainlab.checks.config import dict_nodes
from trainlab.utils.errors import ConfigError
from trainlab.utils.omegaconf_internals import is_interpolation, node_at, raw_value
from trainlab.utils.source import defines_class

DOWNLOADS = ("pretrained", "weights")  # a model's weights fetched from a hub
# Data keys that name a place outside the run: given on the command line, or not at all.
DATA_PLACES = ("endpoint_url", "cache_dir")


def _text(node, key: str) -> str:
    """A key's value as the file wrote it (an interpolation as its text, not resolved)."""
    child = node_at(node, key)
    if isinstance(child, DictConfig | ListConfig) and not is_interpolation(child):
        return str(OmegaConf.to_container(child, resolve=False))
    return str(raw_value(child))


def _refuse_everywhere(node, path: str, source: str) -> None:
    """``_args_`` and a truthy download key at any depth of ``node``."""
    for where, mapping in dict_nodes(node, path):
        for key in map(str, mapping.keys()):
            if key == "_args_":
                raise ConfigError(
                    f"{source}: {where}._args_ gives arguments by position, which no config "
                    "of trainlab writes; a copied run's config is read by name only"
                )
            if key in DOWNLOADS and _text(mapping, key) not in ("None", "False", "false"):
                raise ConfigError(
                    f"{source}: {where}.{key}={_text(mapping, key)} would download weights; a "
                    "copied run's config reaches no network (its checkpoint holds the weights)"
                )


def _nested_targets(node, path: str, source: str) -> None:
    """Every ``_target_`` below an encoder's own: one of trainlab's classes."""
    for where, mapping in dict_nodes(node, path):
        if where != path and "_target_" in mapping:
            target = _text(mapping, "_target_")
            if not defines_class(target):
                raise ConfigError(
                    f"{source}: {where}._target_={target} is built into the encoder; in a "
                    "copied run's encoder only trainlab's own classes may be (e.g. its "
                    "GlobalBatchNorm2d)"
                )


def confine_model(node: DictConfig, source: str) -> None:
    """A model node from a copied run: no download and no positional arguments anywhere."""
    _refuse_everywhere(node, "model", source)


def confine_encoder(node: DictConfig, key: str, source: str) -> None:
    """Refuse what an encoder node from a copied run must not do (see the module)."""
    _refuse_everywhere(node, key, source)
    _nested_targets(node, key, source)


def confine_data(node: DictConfig, given: set[str], source: str) -> None:
    """A data node from a copied run, in place: no download, and no endpoint, cache folder
    or remote root that the command line did not give (``given``: its ``data.<key>``)."""
    _refuse_everywhere(node, "data", source)
    if "download" in node and "data.download" not in given:
        node.download = False  # the command line's +data.download=true is the user's own
    for key in DATA_PLACES:
        if node.get(key) is not None and f"data.{key}" not in given:
            raise ConfigError(
                f"{source}: data.{key}={_text(node, key)} comes from a copied run, which may "
                f"name no server or folder: give +data.{key}=<yours> (or null) on the command line"
            )
    if "root" in node and "://" in _text(node, "root") and "data.root" not in given:
        raise ConfigError(
            f"{source}: data.root={_text(node, 'root')} is remote; a copied run's config may "
            "send no request: give +data.root=<yours> on the command line"
        )
