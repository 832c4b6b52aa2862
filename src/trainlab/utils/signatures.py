"""The constructor signatures of every ``_target_`` that configs/ names, kept as text in
signatures.json, so that train.py's light entry checks types and ranges (and reads a model's
``monitor``) without importing torch, Lightning or the model: importing them takes seconds.

The file is generated: ``make signatures`` writes it, and tests/test_placement.py fails
while it differs from the code. A target it does not hold (a fork's new class before the
file is written again) is checked later, once the run imports its class.
"""

import collections.abc
import functools
import inspect
import json
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import annotated_types

from trainlab.utils.source import configured_targets

FILE = Path(__file__).with_name("signatures.json")
# Names an annotation's text may use: typing, annotated_types' bounds and builtin types.
NAMESPACE = {"typing": typing, "collections": collections, "NoneType": type(None)} | {
    name: getattr(annotated_types, name) for name in annotated_types.__all__
}
CONTAINERS = {tuple: "tuple", list: "list", dict: "dict", set: "set"}


def annotations_of(target: str) -> dict[str, Any]:
    """Annotated arguments of a target, imported; for a class, of every ``__init__`` in its
    MRO, since subclasses often pass ``**kwargs`` through to their base."""
    from hydra.utils import get_object

    try:
        obj = get_object(target)
    except Exception:
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


def as_text(annotation: Any) -> str | None:
    """An annotation as text that ``evaluate`` turns back into it, or None where it names
    a class beyond builtins (a torch module: a nested ``_target_`` node, checked on its own)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "NoneType"
    if annotation is Any:
        return "typing.Any"
    if origin is Annotated:
        base = as_text(args[0])
        bounds = [repr(m) for m in args[1:] if type(m).__module__ == "annotated_types"]
        return base and (f"typing.Annotated[{base}, {', '.join(bounds)}]" if bounds else base)
    if origin is Literal:
        return f"typing.Literal[{', '.join(map(repr, args))}]"
    parts = [("..." if a is Ellipsis else as_text(a)) for a in args]
    if None in parts:
        return None
    if origin in (Union, types.UnionType):
        return f"typing.Union[{', '.join(parts)}]"
    if origin in CONTAINERS or origin is collections.abc.Sequence:
        name = CONTAINERS.get(origin, "collections.abc.Sequence")
        return f"{name}[{', '.join(parts)}]" if parts else name
    if isinstance(annotation, type) and annotation.__module__ == "builtins":
        return annotation.__qualname__
    return None


@functools.cache
def evaluate(text: str) -> Any:
    return eval(text, {"__builtins__": __builtins__, **NAMESPACE})  # our own file's text


def describe(target: str) -> dict[str, Any]:
    """What the light entry needs of one target: its arguments' annotations as text, and a
    model's ``monitor`` and ``monitor_mode``."""
    from hydra.utils import get_object

    entry: dict[str, Any] = {
        "arguments": {
            name: text
            for name, annotation in annotations_of(target).items()
            if (text := as_text(annotation)) not in (None, "typing.Any")  # Any takes all
        }
    }
    try:
        obj = get_object(target)
    except Exception:
        return entry
    for key in ("monitor", "monitor_mode"):
        if isinstance(getattr(obj, key, None), str):
            entry[key] = getattr(obj, key)
    return entry


def generate() -> dict[str, Any]:
    return {target: describe(target) for target in sorted(configured_targets())}


@functools.cache
def signatures() -> dict[str, Any]:
    return json.loads(FILE.read_text()) if FILE.is_file() else {}


def known(target: str) -> dict[str, Any] | None:
    """The generated entry of ``target``, or None where the file holds none."""
    return signatures().get(target)


def annotations(target: str) -> dict[str, Any] | None:
    """The target's argument annotations from the generated file, evaluated (no imports)."""
    entry = known(target)
    return None if entry is None else {k: evaluate(v) for k, v in entry["arguments"].items()}


def write() -> None:
    FILE.write_text(json.dumps(generate(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {FILE}")
