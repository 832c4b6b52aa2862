"""Checks the composed config before anything heavy starts, so mistakes cost one line.

Hydra already rejects unknown groups and keys. What it cannot see is a value of the wrong
type for a class's argument (``trainer.max_epochs=ten``), because the config has no schema:
the schema is the signature of each ``_target_``, so that is what is checked here.
"""

import inspect
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf

from trainlab.utils.errors import ConfigError
from trainlab.utils.logging import get_logger

log = get_logger(__name__)

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
    """(dotted path, node) for every mapping in ``cfg``, depth first. Children are taken as
    nodes, unresolved: a resolver (``${monitor:...}`` imports the model's class) runs only
    where a check reads that value."""
    if isinstance(cfg, ListConfig):
        for i in range(len(cfg)):
            yield from _dict_nodes(cfg._get_node(i), f"{path}[{i}]")
    elif isinstance(cfg, DictConfig):
        yield path, cfg
        for key in cfg:
            yield from _dict_nodes(cfg._get_node(key), f"{path}.{key}")


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


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Ranges by key, wherever the key appears (a model, its optimizer, the trainer, the data):
# (test, what the value must be). Lists are checked item by item.
RANGES = {
    "lr": (lambda v: v > 0, "above 0 (the peak learning rate)"),
    "patch_size": (lambda v: v >= 1, "at least 1"),
    "image_size": (lambda v: v >= 1, "at least 1"),
    "img_size": (lambda v: v >= 1, "at least 1 (data.image_size)"),
    "num_targets": (lambda v: v >= 1, "at least 1 target block"),
    "min_keep": (lambda v: v >= 1, "at least 1"),
    "depth": (lambda v: v >= 1, "at least 1 block"),
    "accumulate_grad_batches": (lambda v: v >= 1, "at least 1 (1: no accumulation)"),
    "check_val_every_n_epoch": (lambda v: v >= 1, "at least 1 (or null with val_check_interval)"),
    "log_every_n_steps": (lambda v: v >= 1, "at least 1"),
    "warmup_epochs": (lambda v: v >= 0, "0 or more"),
    "weight_decay": (lambda v: v >= 0, "0 or more"),
    "num_workers": (lambda v: v >= 0, "0 or more"),
    "momentum": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "ema": (lambda v: 0 <= v <= 1, "in [0, 1] (EMA momentum)"),
    "drop_path_rate": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "mask_ratio": (lambda v: 0 < v < 1, "in (0, 1)"),
    "bank_size": (lambda v: v >= 1, "at least 1"),
    "knn_k": (lambda v: v >= 1, "at least 1 neighbour"),
    "val_fraction": (lambda v: 0 < v < 1, "in (0, 1)"),
    "train_fraction": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "max_epochs": (lambda v: v >= -1, "-1 (no limit) or more"),
    "train_per_class": (lambda v: v >= 1, "at least 1 (or null: all)"),
    "eval_per_class": (lambda v: v >= 1, "at least 1 (or null: all)"),
    "agree_every_n_batches": (lambda v: v >= 1, "at least 1"),
}
# [low, high] ranges: low <= high, and each bound in its interval.
INTERVALS = {
    "context_scale": (lambda v: 0 < v <= 1, "in (0, 1], a fraction of the grid"),
    "target_scale": (lambda v: 0 < v <= 1, "in (0, 1], a fraction of the grid"),
    "crop_scale": (lambda v: 0 < v <= 1, "in (0, 1], a fraction of the image"),
    "context_aspect": (lambda v: v > 0, "above 0"),
    "target_aspect": (lambda v: v > 0, "above 0"),
    "ema": (lambda v: 0 <= v <= 1, "in [0, 1]"),
}


def check_ranges(node: DictConfig, path: str) -> None:
    """RANGES and INTERVALS: one line naming the key and what it must be."""
    for key, (ok, must) in RANGES.items():
        value = node.get(key)
        if key == "lr" and isinstance(value, ListConfig):  # a schedule may start at 0
            ok, must = (lambda v: v >= 0), "0 or more in a schedule"
        for v in _own_values(node, key):
            if not ok(v):
                raise ConfigError(f"{path}.{key}={_plain(value)} is not valid: it must be {must}")
    for key, (ok, must) in INTERVALS.items():
        value = node.get(key)
        if not isinstance(value, ListConfig) or len(value) != 2 or not all(map(_number, value)):
            continue
        low, high = value
        if not (ok(low) and ok(high)):
            raise ConfigError(
                f"{path}.{key}={_plain(value)} is not valid: each bound must be {must}"
            )
        if low > high:
            raise ConfigError(
                f"{path}.{key}={_plain(value)} is given backwards: write [{high}, {low}] (low, high)"
            )


def _own_values(node: DictConfig, key: str) -> list:
    """The numbers of ``node.key`` (a list item by item) that are written there, not
    interpolated from another key: that key is checked, and named, where it is written."""
    if key not in node or node._get_node(key)._is_interpolation():
        return []
    value = node[key]
    if not isinstance(value, ListConfig):
        return [value] if _number(value) else []
    return [
        v for i, v in enumerate(value) if _number(v) and not value._get_node(i)._is_interpolation()
    ]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, ListConfig) else value


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


def check_config(
    cfg: DictConfig, typed: list[str] = (), types: bool = True, values: bool = True
) -> None:
    """All checks that need no data and no devices. ``typed``: the command line's overrides.
    The type check imports every ``_target_`` (torch, Lightning), so train.py runs the value
    checks first (``types=False``: a bad value is refused in a second) and the type check
    after (``values=False``: the values, and their warnings, once only)."""
    for key in cfg:
        if key == "hydra" or not isinstance(cfg._get_node(key), DictConfig):
            continue  # Hydra's own node (validated by Hydra), and root values
        for path, node in _dict_nodes(cfg._get_node(key), str(key)):
            if types:
                check_types(node, path)
            if values:
                check_ranges(node, path)
                check_values(node, path)
    if not values:
        return
    seed = cfg.get("seed")
    if _number(seed) and not 0 <= seed < 2**32:
        raise ConfigError(f"seed={seed} is not valid: it must be in [0, 2**32) (or null)")
    data = cfg.get("data")
    if isinstance(data, DictConfig) and _number(data.get("in_chans")):
        for key in ("mean", "std"):
            value = data.get(key)
            if isinstance(value, ListConfig) and len(value) not in (1, data.in_chans):
                raise ConfigError(
                    f"data.{key} has {len(value)} values for data.in_chans={data.in_chans} "
                    f"channels: give {data.in_chans} values (or 1 for all)"
                )
    check_batch_overrides(cfg, typed)
    check_resume_from(cfg)
    warn_unvalidated_epochs(cfg)


def check_resume_from(cfg: DictConfig) -> None:
    start = cfg.get("resume_from")
    if start is None:
        return
    if cfg.get("resume"):
        raise ConfigError(
            "resume=true continues this run dir, resume_from=... starts a new one from another "
            "run's checkpoint: pass one of them"
        )
    if not Path(start).is_file():
        what = "a directory" if Path(start).is_dir() else "not found"
        raise ConfigError(
            f"resume_from={start} is {what}: give a checkpoint file, e.g. "
            "logs/train/runs/<run>/checkpoints/last.ckpt"
        )


def check_batch_overrides(cfg: DictConfig, typed: list[str]) -> None:
    """data.batch_size typed on the command line while data.global_batch_size is set would be
    replaced silently by global / (devices x nodes x accumulation): refused instead."""
    keys = {o.lstrip("+~").split("=", 1)[0] for o in typed}
    global_batch = OmegaConf.select(cfg, "data.global_batch_size")
    if "data.batch_size" in keys and global_batch and "data.global_batch_size" not in keys:
        raise ConfigError(
            f"data.batch_size={cfg.data.batch_size} would be replaced by data.global_batch_size="
            f"{global_batch} / (devices x nodes x accumulation): add data.global_batch_size=null "
            "to set the batch per device, or set data.global_batch_size instead"
        )


def warn_unvalidated_epochs(cfg: DictConfig) -> None:
    """A recipe that validates every few epochs, shortened on the command line, would end
    without validating its last epochs: no optimized metric, no best checkpoint for them."""
    every, epochs = cfg.trainer.get("check_val_every_n_epoch"), cfg.trainer.get("max_epochs")
    if isinstance(every, int) and isinstance(epochs, int) and 0 < epochs and epochs % every:
        log.warning(
            f"trainer.max_epochs={epochs} is not a multiple of trainer.check_val_every_n_epoch="
            f"{every}: the last {epochs % every} epoch(s) are not validated, so "
            f"{cfg.get('optimized_metric')} and the best checkpoint do not see them; "
            f"add trainer.check_val_every_n_epoch=1 to validate every epoch"
        )
