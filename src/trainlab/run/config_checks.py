"""Checks the composed config before anything heavy starts, so mistakes cost one line.

Hydra already rejects unknown groups and keys. What it cannot see is a value of the wrong
type for a class's argument (``trainer.max_epochs=ten``), because the config has no schema:
the schema is the signature of each ``_target_``, so that is what is checked here.
"""

import inspect
import types
import typing
from typing import Any, Literal, Union

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig

from trainlab.utils.errors import ConfigError

_SIMPLE = (bool, int, float, str, type(None))


def _accepts(annotation: Any, value: Any) -> bool | None:
    """True/False when the annotation is simple enough to judge, None when it is not."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return value in typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        verdicts = [_accepts(arg, value) for arg in typing.get_args(annotation)]
        if any(v is True for v in verdicts):
            return True
        return False if all(v is False for v in verdicts) else None
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation in _SIMPLE:
        return isinstance(value, annotation)
    return None


def _describe(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return f"one of {list(typing.get_args(annotation))}"
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(annotation))
    return "null" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


def _hints(target: str) -> dict[str, Any]:
    """Annotated arguments of a target; for a class, of every ``__init__`` in its MRO,
    since subclasses often pass ``**kwargs`` through to their base."""
    try:
        obj = get_object(target)
    except Exception:
        return {}
    fns = [c.__init__ for c in reversed(obj.__mro__)] if inspect.isclass(obj) else [obj]
    hints: dict[str, Any] = {}
    for fn in fns:
        try:
            hints.update(typing.get_type_hints(fn))
        except Exception:  # unresolvable annotations: nothing to check against
            pass
    return hints


def _dict_nodes(cfg: Any, path: str):
    """(dotted path, node) for every mapping in ``cfg``, depth first."""
    if isinstance(cfg, ListConfig):
        for i, item in enumerate(cfg):
            yield from _dict_nodes(item, f"{path}[{i}]")
    elif isinstance(cfg, DictConfig):
        yield path, cfg
        for key in cfg:
            yield from _dict_nodes(cfg[key], f"{path}.{key}")


def check_types(node: DictConfig, path: str) -> None:
    """Raise ConfigError for a value whose type the node's ``_target_`` cannot take."""
    hints = _hints(node["_target_"]) if "_target_" in node else {}
    for key in node:
        value = node[key]
        if key in hints and _accepts(hints[key], value) is False:
            raise ConfigError(
                f"{path}.{key}={value!r} is not valid: {node['_target_']} expects "
                f"{_describe(hints[key])}"
            )


def check_values(node: DictConfig, path: str) -> None:
    """Values of the right type that cannot work, found here rather than deep in a model or
    a DataLoader: a patch size that does not divide the image, a batch size below 1, schedules
    that end before the run."""
    image, patch = node.get("img_size"), node.get("patch_size")
    if isinstance(image, int) and isinstance(patch, int) and patch > 0 and image % patch:
        raise ConfigError(
            f"{path}.img_size={image} (data.image_size) is not a multiple of "
            f"{path}.patch_size={patch}: set data.image_size to a multiple of {patch} "
            f"(e.g. {image // patch * patch or patch}) or change the patch size"
        )
    scale = node.get("schedule_scale")
    if isinstance(scale, (int, float)) and scale < 1:
        raise ConfigError(
            f"{path}.schedule_scale={scale} would end the schedules before the run: use 1 "
            "(they end with the run) or more (the run stops before they end)"
        )
    for key in ("batch_size", "eval_batch_size", "global_batch_size"):
        value = node.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ConfigError(f"{path}.{key}={value} must be at least 1")


def check_config(cfg: DictConfig) -> None:
    """All checks that need no data and no devices."""
    for key in cfg:
        if key == "hydra":  # Hydra's own node, already validated by Hydra
            continue
        for path, node in _dict_nodes(cfg[key], str(key)):
            check_types(node, path)
            check_values(node, path)
