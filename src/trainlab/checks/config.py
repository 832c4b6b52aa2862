"""Checks the composed config before anything heavy starts, so mistakes cost one line.

Hydra already rejects unknown groups and keys. What it cannot see is a value of the wrong
type for a class's argument (``trainer.max_epochs=ten``), because the config has no schema:
the schema is the signature of each ``_target_``, so that is what is checked here: pydantic
validates each value against its argument's annotation, types and the ranges the class
declares with annotated_types (trainlab.utils.ranges). What a signature cannot say (rules
across keys, keys of classes trainlab does not own) is checked by the plain functions below.
"""

import collections.abc
import functools
import inspect
import math
import types
import typing
from typing import Annotated, Any, Literal, Union

import typing_extensions
from omegaconf import DictConfig, ListConfig, OmegaConf
from pydantic import ConfigDict, TypeAdapter, ValidationError

from trainlab.run.overrides import flat_leaves
from trainlab.utils.errors import ConfigError
from trainlab.utils.files import home_path, not_a_file
from trainlab.utils.logging import get_logger
from trainlab.utils.omegaconf_internals import is_interpolation, node_at

log = get_logger(__name__)

# Finite numbers everywhere (inf/nan is never a setting); classes as annotations checked by
# isinstance (a value given for them is then a nested _target_ node, checked on its own).
_PYDANTIC = ConfigDict(allow_inf_nan=False, arbitrary_types_allowed=True)


def annotations_of(target: str) -> dict[str, Any]:
    """Annotated arguments of a target, imported; for a class, of every ``__init__`` in its
    MRO, since subclasses often pass ``**kwargs`` through to their base."""
    from hydra.utils import get_object

    try:
        obj = get_object(target)
    except Exception:  # an import error: said where the node is built
        return {}
    fns = [c.__init__ for c in reversed(obj.__mro__)] if inspect.isclass(obj) else [obj]
    hints: dict[str, Any] = {}
    for fn in fns:
        try:
            hints.update(typing.get_type_hints(fn, include_extras=True))
        except Exception:  # unresolvable annotations: nothing to check against
            pass
    hints.pop("return", None)
    return hints


@functools.cache
def _adapter(annotation: Any) -> TypeAdapter | None:
    """pydantic's validator for one annotation; None where pydantic cannot build one."""
    try:
        return TypeAdapter(annotation, config=_PYDANTIC)
    except Exception:  # a forward reference, a protocol: nothing to validate against
        return None


def _describe(annotation: Any) -> str:
    """An annotation as a reader writes it: ``tuple[float >= 0, float > 0, float >= 0]``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        bounds = [
            f"{op} {getattr(m, name)}"
            for m in args[1:]
            for name, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
            if getattr(m, name, None) is not None
        ]
        return " ".join([_describe(args[0]), " and ".join(bounds)]).strip()
    if origin is Literal:
        return f"one of {list(args)}"
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in args)
    if origin in (tuple, list, collections.abc.Sequence):
        name = "tuple" if origin is tuple else "list"
        return f"{name}[{', '.join(_describe(a) for a in args if a is not ...)}]"
    if typing_extensions.is_typeddict(annotation):  # a recipe such as data.views' View: its keys
        return f"{{{', '.join(annotation.__annotations__)}}}"
    return "null" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


def dict_nodes(cfg: Any, path: str):
    """(dotted path, node) for every mapping in ``cfg``, depth first. Children are taken as
    nodes, unresolved: a resolver (``${monitor:...}`` imports the model's class) runs only
    where a check reads that value, and an interpolated mapping is not entered."""
    if isinstance(cfg, ListConfig) and not is_interpolation(cfg):
        for i in range(len(cfg)):
            yield from dict_nodes(node_at(cfg, i), f"{path}[{i}]")
    elif isinstance(cfg, DictConfig) and not is_interpolation(cfg):
        yield path, cfg
        for key in cfg:
            yield from dict_nodes(node_at(cfg, key), f"{path}.{key}")


def _has_target(value: Any) -> bool:
    if isinstance(value, dict):
        return "_target_" in value or any(map(_has_target, value.values()))
    return isinstance(value, list) and any(map(_has_target, value))


def check_types(node: DictConfig, path: str) -> None:
    """Raise ConfigError for a value that the node's ``_target_`` signature refuses: its
    type, or the range its annotation declares (trainlab.utils.ranges), via pydantic. The
    signature is read from the imported target."""
    target = node_at(node, "_target_") if "_target_" in node else None
    if target is None or is_interpolation(target):
        hints = {}  # an interpolated target: resolved (and checked) only where it is built
    else:
        target = node["_target_"]
        hints = annotations_of(target)
    for key in node:
        try:
            adapter = _adapter(hints[key]) if key in hints else None
        except TypeError:  # an annotation that cannot be a cache key
            adapter = _adapter.__wrapped__(hints[key])
        if isinstance(node_at(node, key), DictConfig):
            _check_nested_class(node, key, hints.get(key), path)
        if adapter is None:
            continue
        try:
            value = node[key]
            if isinstance(value, (DictConfig, ListConfig)):
                value = OmegaConf.to_container(value, resolve=True)
        except Exception:  # an interpolation that only the run can resolve
            continue
        if _has_target(value):
            continue  # a nested object: its own node is checked
        try:
            adapter.validate_python(value)
        except ValidationError as e:
            error = e.errors()[0]
            where = "".join(f"[{i}]" for i in error["loc"])
            takes = f"; {node['_target_'].rsplit('.', 1)[-1]} takes {_describe(hints[key])}"
            raise ConfigError(
                f"{path}.{key}={value!r} is not valid: {error['msg'][0].lower()}"
                f"{error['msg'][1:]}{f' (item {where})' if where else ''}"
                + ("" if typing.get_origin(hints[key]) is Literal else takes)  # choices listed
            ) from None


def _check_nested_class(node: DictConfig, key: str, hint: Any, path: str) -> None:
    """A nested ``_target_`` node given for an argument annotated with a class must build
    that class: ``experiment=ijepa_digits model/encoder=resnet`` gives I-JEPA, which masks a
    ViT's tokens, a CNN. Said here in one line, where it would otherwise fail inside the
    model's config (an interpolation of a key the CNN lacks) or its constructor."""
    from hydra.utils import get_object

    target = node[key].get("_target_") if "_target_" in node[key] else None
    if not isinstance(hint, type) or not isinstance(target, str) or hint.__module__ == "builtins":
        return
    try:
        built = get_object(target)
    except Exception:  # an import error: said where the node is built
        return
    if isinstance(built, type) and not issubclass(built, hint):
        owner = str(node.get("_target_", path)).rsplit(".", 1)[-1]
        raise ConfigError(
            f"{path}.{key} builds a {built.__name__} but {owner} takes a {hint.__name__} "
            f"({hint.__module__}): choose a {path}.{key} config that builds one "
            f"(python train.py --help lists the options)"
        )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Ranges by key, wherever the key appears, for the classes trainlab does not own (the
# Trainer, torch's optimizers: their signatures declare no ranges) and for keys that are no
# class's argument; trainlab's own classes declare theirs (trainlab.utils.ranges), checked by
# check_types. These run in train.py's light entry, in under a second. (test, what the value
# must be); lists are checked item by item.
RANGES = {
    "lr": (lambda v: v > 0, "above 0 (the peak learning rate)"),
    "accumulate_grad_batches": (lambda v: v >= 1, "at least 1 (1: no accumulation)"),
    "check_val_every_n_epoch": (lambda v: v >= 1, "at least 1 (or null with val_check_interval)"),
    "log_every_n_steps": (lambda v: v >= 1, "at least 1"),
    "weight_decay": (lambda v: v >= 0, "0 or more"),
    "momentum": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "max_epochs": (lambda v: v >= -1, "-1 (no limit) or more"),
    "min_epochs": (lambda v: v >= 0, "0 or more"),
    "gradient_clip_val": (lambda v: v >= 0, "0 or more (0 or null: no clipping)"),
    "reference_batch": (lambda v: v >= 1, "at least 1 (the batch the learning rates are for)"),
    "train_per_class": (lambda v: v >= 1, "at least 1 (or null: all)"),
    "eval_per_class": (lambda v: v >= 1, "at least 1 (or null: all)"),
    "knn_k": (lambda v: v >= 1 and v == int(v), "a whole number of neighbours, at least 1"),
}
# torch.set_float32_matmul_precision's values (trainer/matmul_precision.py)
MATMUL_PRECISIONS = ("highest", "high", "medium")
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
            if not math.isfinite(v) and not isinstance(value, ListConfig):  # items: by signature
                raise ConfigError(
                    f"{path}.{key}={_plain(value)} is not valid: {path}.{key} takes a finite number"
                )
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
    if key not in node or is_interpolation(node_at(node, key)):
        return []
    value = node[key]
    if not isinstance(value, ListConfig):
        return [value] if _number(value) else []
    return [
        v for i, v in enumerate(value) if _number(v) and not is_interpolation(node_at(value, i))
    ]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, ListConfig) else value


def check_values(node: DictConfig, path: str) -> None:
    """Values of the right type that cannot work, found here rather than deep in a model or
    a DataLoader: a patch size that does not divide the image, schedules that end before the
    run."""
    image, patch = node.get("img_size"), node.get("patch_size")
    if isinstance(image, int) and isinstance(patch, int) and patch > 0 and image % patch:
        raise ConfigError(
            f"{path}.img_size={image} (data.image_size) is not a multiple of "
            f"{path}.patch_size={patch}: set data.image_size to a multiple of {patch} "
            f"(e.g. {image // patch * patch or patch}) or change the patch size"
        )
    layers, encoder = node.get("target_layers"), node.get("encoder")
    depth = encoder.get("depth") if isinstance(encoder, DictConfig) else None
    if isinstance(layers, int) and isinstance(depth, int) and layers > depth:
        raise ConfigError(
            f"{path}.target_layers={layers} is more than the encoder's {depth} blocks "
            f"({path}.encoder.depth): use at most {depth}"
        )
    scale = node.get("schedule_scale")
    if isinstance(scale, (int, float)) and scale < 1:
        raise ConfigError(
            f"{path}.schedule_scale={scale} would end the schedules before the run: use 1 "
            "(they end with the run) or more (the run stops before they end)"
        )


def check_config(
    cfg: DictConfig,
    typed: list[str] = (),
    imports: bool = True,
    warn: bool = True,
) -> None:
    """All checks that need no data and no devices. ``typed``: the command line's overrides.
    Importing every ``_target_`` for its signature takes seconds (torch, Lightning), so
    the check before torch (``imports=False``) checks what needs no signature: a bad value
    there is refused in under a second (``warn=False``: its warnings come once, from the
    full check after)."""
    refuse_home_tildes(cfg)  # first: a check of the path would say it is missing
    for key in cfg:
        if key == "hydra" or not isinstance(node_at(cfg, key), DictConfig):
            continue  # Hydra's own node (validated by Hydra), and root values
        nodes = list(dict_nodes(node_at(cfg, key), str(key)))
        for path, node in nodes:  # first: their messages say more
            check_ranges(node, path)
            check_values(node, path)
        for path, node in nodes if imports else ():
            check_types(node, path)
    seed = cfg.get("seed")
    if _number(seed) and not 0 <= seed < 2**32:
        raise ConfigError(f"seed={seed} is not valid: it must be in [0, 2**32) (or null)")
    peak = cfg.get("peak_tflops")
    if peak is not None and not (_number(peak) and math.isfinite(peak) and peak > 0):
        raise ConfigError(
            f"peak_tflops={peak!r} is not valid: give the GPU's dense bf16 TFLOP/s, a number "
            "above 0 (e.g. peak_tflops=989 for an H100), or null"
        )
    matmul = cfg.get("matmul_precision")
    if matmul is not None and matmul not in MATMUL_PRECISIONS:
        raise ConfigError(
            f"matmul_precision={matmul!r} is not valid: give one of {', '.join(MATMUL_PRECISIONS)}"
        )
    if cfg.get("compile") and cfg.get("compiler") is None:  # a fork without the compile part
        raise ConfigError(
            "compile=true needs the compile part's compiler node (configs/compiler/, "
            "docs/parts/compile.md), which this config lacks: pass compile=false"
        )
    data = cfg.get("data")
    if isinstance(data, DictConfig) and _number(data.get("in_chans")):
        for key in ("mean", "std"):
            value = data.get(key)
            if isinstance(value, ListConfig) and len(value) not in (1, data.in_chans):
                raise ConfigError(
                    f"data.{key} has {len(value)} values for data.in_chans={data.in_chans} "
                    f"channels: give {data.in_chans} values (or 1 for all)"
                )
    low, high = cfg.trainer.get("min_epochs"), cfg.trainer.get("max_epochs")
    if _number(low) and _number(high) and high >= 0 and low > high:
        raise ConfigError(
            f"trainer.min_epochs={low} is above trainer.max_epochs={high}: the run could "
            "never stop; lower trainer.min_epochs or raise trainer.max_epochs"
        )
    check_lr_schedule(cfg.get("model"))
    check_batch_overrides(cfg, typed)
    check_resume_from(cfg)
    if warn:
        warn_unvalidated_epochs(cfg)
        warn_warmup_past_the_run(cfg)


def refuse_home_tildes(cfg: DictConfig) -> None:
    """A value ``~/...`` would be read as a folder named ~ in the working directory."""
    values = OmegaConf.to_container(cfg, resolve=False)
    values.pop("hydra", None)
    for key, value in flat_leaves(values).items():
        if fix := home_path(key, value):
            raise ConfigError(fix)


def check_lr_schedule(model: DictConfig | None) -> None:
    """A schedule's warm-up start and cosine end at most its peak (model.optimizer.lr):
    lr_scaling multiplies all three alike, so this holds after it too."""
    optimizer = model.get("optimizer") if isinstance(model, DictConfig) else None
    peak = optimizer.get("lr") if isinstance(optimizer, DictConfig) else None
    if not _number(peak):
        return
    for key in ("start_lr", "final_lr"):
        value = model.get(key)
        if _number(value) and math.isfinite(value) and value > peak:  # inf: by signature
            raise ConfigError(
                f"model.{key}={value} is above the peak model.optimizer.lr={peak}: give "
                f"model.{key} at most {peak}, or raise model.optimizer.lr"
            )


def check_resume_from(cfg: DictConfig) -> None:
    start = cfg.get("resume_from")
    if start is None:
        return
    if cfg.get("resume"):
        raise ConfigError(
            "resume=true continues this run dir, resume_from=... starts a new one from another "
            "run's checkpoint: pass one of them"
        )
    if what := not_a_file(start):
        raise ConfigError(
            f"resume_from={start} {what}: give a checkpoint file, e.g. "
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


def warn_warmup_past_the_run(cfg: DictConfig) -> None:
    """A recipe's warm-up, kept when the run is shortened, would take the whole run: the
    learning rate never reaches its peak (model.optimizer.lr) and the cosine never starts."""
    model = cfg.get("model")
    warmup = model.get("warmup_epochs") if isinstance(model, DictConfig) else None
    epochs = cfg.trainer.get("max_epochs")
    if _number(warmup) and isinstance(epochs, int) and 0 < epochs <= warmup:
        log.warning(
            f"model.warmup_epochs={warmup} is not below trainer.max_epochs={epochs}: the "
            "learning rate warms up for the whole run and never reaches model.optimizer.lr; "
            f"pass model.warmup_epochs below {epochs}"
        )
