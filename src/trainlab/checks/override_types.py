"""A value typed on the command line keeps the type its config gives the key: ``compile=maybe``,
``seed=1.5``, ``resume=no`` or ``model.optimizer.lr=inf`` are refused in one line naming the
key, before torch is imported.

Hydra parses ``maybe`` as a string and ``1.5`` as a float and merges them over a bool or an
int without a word (the yaml files have no schema), so a bool key given ``maybe`` read as
true, and ``seed=1.5`` ran as seed 1. The type a key expects is the type of its value in the
config composed without the command line's values (its groups and experiment kept): what the
yaml files say. Keys whose value there is null, or that the command line adds (``+key``),
have no type to hold to, and null is always taken; their classes' signatures are checked
later (checks/config.py). So are the arguments of trainlab's own classes, whose signatures
say their types and ranges, and Lightning's own nodes (LIGHTNING_NODES), whose arguments
take several types (``trainer.devices=[0,2]``, ``trainer.limit_train_batches=0.5``).
"""

import math

from hydra import compose
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, ListConfig, OmegaConf

from trainlab.utils.errors import ConfigError
from trainlab.utils.source import defines_class

LIGHTNING_NODES = ("trainer.", "callbacks.", "logger.", "strategy.", "launcher.")


def _expects(base, value) -> str | None:
    """What ``value`` should be, given the key's configured ``base``; None when it fits.
    null always fits: it is how a config turns a setting off (data.global_batch_size=null)."""
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value) and isinstance(base, (int, float)):
        return "a finite number"
    if isinstance(base, bool):
        return None if isinstance(value, bool) else "true or false"
    if isinstance(base, int):
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if isinstance(base, float):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if number else "a number"
    return None


def check_override_types(cfg: DictConfig, config_name: str, task_overrides: list[str]) -> None:
    """Refuse a command-line value whose type differs from the one its config gives the key."""
    parsed = OverridesParser.create().parse_overrides(task_overrides)
    values = {}
    for o in parsed:
        key = o.key_or_group
        if o.is_add() or o.is_delete() or o.is_sweep_override():
            continue
        if key.startswith(("hydra.", *LIGHTNING_NODES)) or _argument_of_trainlab(cfg, key):
            continue
        if o.is_force_add() or isinstance(OmegaConf.select(cfg, key, default=None), DictConfig):
            continue  # ++key, or a group choice (data=mnist)
        if "." not in key and key not in cfg:
            continue  # a group with no node of its name (experiment=..., debug=...)
        values[key] = o.input_line
    if not values:
        return
    kept = [o for o in task_overrides if o not in values.values()]
    try:
        base = compose(config_name=config_name, overrides=kept)
    except Exception:  # the command's own config composed; a base without its values need not
        return
    for key in values:
        if _interpolated(base, key) or _interpolated(cfg, key):
            continue  # no literal type in the yaml (and resolving one may read data)
        node_base = OmegaConf.select(base, key, default=None, throw_on_missing=False)
        if isinstance(node_base, (DictConfig, ListConfig)) or node_base is None:
            continue
        value = OmegaConf.select(cfg, key)
        if (expected := _expects(node_base, value)) is not None:
            raise ConfigError(
                f"{key}={value!r} is not valid: {key} takes {expected} (configured: {node_base!r})"
            )


def _argument_of_trainlab(cfg: DictConfig, key: str) -> bool:
    """Whether ``key`` is an argument of a class of trainlab: its signature says the type.
    Hydra's own keys of the node (``_partial_``, ``_recursive_``, ...) are no argument."""
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key, default=None) if parent_key else None
    if leaf.startswith("_") or not isinstance(parent, DictConfig):
        return False
    if _interpolated(cfg, f"{parent_key}._target_"):
        return False
    target = parent.get("_target_")
    return isinstance(target, str) and defines_class(target)


def _interpolated(cfg: DictConfig, key: str) -> bool:
    """Whether ``key``'s node (dotted) holds an interpolation; False when there is none."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return isinstance(node, DictConfig) and leaf in node and OmegaConf.is_interpolation(node, leaf)
