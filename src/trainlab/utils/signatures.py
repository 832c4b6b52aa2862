"""The constructor signatures of the ``_target_``s, kept as text in a cache, signatures.json,
so that train.py's light entry checks types and ranges (and reads a model's ``monitor``)
without importing torch, Lightning or the model: importing them takes seconds.

The cache is nobody's to edit and not in git. Each entry records the environment, the
source files it was read from (the modules of the class and of every base class, and
utils/ranges.py) with their modification times, and a stamp of every module of trainlab (an
annotation may name an alias another module defines); an entry whose files changed, or one
another environment wrote, is not used. Its text is read back by a reader of the few forms
``as_text`` writes, never by ``eval``: an entry that reads otherwise is not used either. The full check, after the run has imported its
classes, writes the entries of the targets it checked (``remember``), so a fork's new or
changed class is checked before torch from its second run on, and after torch, as every
class is, on its first. ``make install`` writes the entries of every target configs/ names
(``write``).
"""

import ast
import builtins
import collections.abc
import functools
import hashlib
import inspect
import json
import os
import sys
import tempfile
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import annotated_types

from trainlab.utils.source import PACKAGE, configured_targets

FILE = Path(__file__).with_name("signatures.json")
# Every entry depends on the project's ranges too: their bounds are written into its text.
RANGES = Path(__file__).with_name("ranges.py")
# Names an annotation's text may use: typing, annotated_types' bounds and builtin types.
BOUNDS = {name: getattr(annotated_types, name) for name in annotated_types.__all__}
NAMESPACE = {"typing": typing, "collections": collections, "NoneType": type(None)} | BOUNDS
CONTAINERS = {tuple: "tuple", list: "list", dict: "dict", set: "set"}
MODULES = (typing, collections, collections.abc)  # the only modules whose names it reads


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
        # Sorted, None last ("int or null"): a union is a set, and typing caches the first
        # order it was built in, so `Union[int, float]` reads back as `Union[float, int]`
        # once another module made that.
        ordered = sorted(parts, key=lambda part: (part == "NoneType", part))
        return f"typing.Union[{', '.join(ordered)}]"
    if origin in CONTAINERS or origin is collections.abc.Sequence:
        name = CONTAINERS.get(origin, "collections.abc.Sequence")
        return f"{name}[{', '.join(parts)}]" if parts else name
    if isinstance(annotation, type) and annotation.__module__ == "builtins":
        return annotation.__qualname__
    return None


@functools.cache
def evaluate(text: str) -> Any:
    """The annotation ``as_text`` wrote as ``text``. Only its forms are read: names of
    NAMESPACE and builtin types, their public attributes, subscripts, constants and
    annotated_types' bounds called with constants; anything else is a ValueError."""
    return _read(ast.parse(text, mode="eval").body)


def _read(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _read(node.operand)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    elif isinstance(node, ast.Name):
        if node.id in NAMESPACE:
            return NAMESPACE[node.id]
        if isinstance(getattr(builtins, node.id, None), type):
            return getattr(builtins, node.id)
    elif isinstance(node, ast.Attribute) and not node.attr.startswith("_"):
        owner = _read(node.value)
        if owner in MODULES and hasattr(owner, node.attr):  # not typing.sys.modules[...]
            return getattr(owner, node.attr)
    elif isinstance(node, ast.Subscript):
        return _read(node.value)[_read(node.slice)]
    elif isinstance(node, ast.Tuple):
        return tuple(_read(item) for item in node.elts)
    elif isinstance(node, ast.Call) and not node.args:
        bound = _read(node.func)
        arguments = {k.arg: _read(k.value) for k in node.keywords}
        constants = all(v is None or isinstance(v, int | float) for v in arguments.values())
        if bound in BOUNDS.values() and constants:
            return bound(**arguments)
    raise ValueError(f"not an annotation's text: {ast.unparse(node)}")


@functools.cache
def project_stamp() -> str:
    """A digest of every module of trainlab, by path, size and time: a cached annotation
    may read an alias of any of them (a Literal of comm hooks), so an edit to one drops
    every entry until a run reads it anew."""
    found = sorted(PACKAGE.rglob("*.py"))
    stats = [(str(f.relative_to(PACKAGE)), f.stat().st_size, f.stat().st_mtime_ns) for f in found]
    return hashlib.sha256(repr(stats).encode()).hexdigest()[:16]


def source_files(obj: Any) -> list[Path]:
    """The files an entry is read from: a class's module and its bases' modules, a
    function's module, and utils/ranges.py."""
    owners = obj.__mro__ if inspect.isclass(obj) else [obj]
    modules = {getattr(sys.modules.get(o.__module__), "__file__", None) for o in owners}
    return sorted({Path(f) for f in modules if f} | {RANGES})


def describe(target: str) -> dict[str, Any]:
    """What the light entry needs of one target: its arguments' annotations as text, a
    model's ``monitor`` and ``monitor_mode``, and the files (with their times) it was read from."""
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
    entry["files"] = {str(f): f.stat().st_mtime_ns for f in source_files(obj)}
    entry["project"] = project_stamp()
    entry["python"] = sys.prefix  # another environment imports other files
    return entry


def generate(targets: Iterable[str] | None = None) -> dict[str, Any]:
    return {t: describe(t) for t in sorted(configured_targets() if targets is None else targets)}


@functools.cache
def signatures() -> dict[str, Any]:
    """The cache's entries of the shape ``describe`` writes; none where the file is missing,
    cut short or not JSON, and none of an entry of another shape: ``remember`` then writes
    the file anew, so a damaged cache costs the light check, never a command."""
    try:
        read = json.loads(FILE.read_text())
    except (OSError, ValueError, RecursionError):  # none yet, a write cut short, a bomb
        return {}
    if not isinstance(read, dict):
        return {}
    return {target: entry for target, entry in read.items() if well_formed(entry)}


def well_formed(entry: Any) -> bool:
    """An entry as ``describe`` writes it: its arguments' texts, its files' times."""
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("arguments"), dict)
        and all(isinstance(t, str) for t in entry["arguments"].values())
        and isinstance(entry.get("files", {}), dict)
        and all(isinstance(t, int) for t in entry.get("files", {}).values())
    )


def current(entry: dict[str, Any]) -> bool:
    """Whether the entry was read in this environment, from files that are as they were."""
    if entry.get("python") != sys.prefix or not entry.get("files"):
        return False
    if entry.get("project") != project_stamp():
        return False
    try:
        return all(os.stat(f).st_mtime_ns == t for f, t in entry["files"].items())
    except OSError:
        return False


def known(target: str) -> dict[str, Any] | None:
    """The cached entry of ``target``, or None where there is none or its sources changed."""
    entry = signatures().get(target)
    return entry if entry is not None and current(entry) else None


def annotations(target: str) -> dict[str, Any] | None:
    """The target's argument annotations from the cache, read back (no imports); None where
    an entry is missing, stale or reads as no annotation (the full check then checks it)."""
    entry = known(target)
    if entry is None:
        return None
    try:
        return {k: evaluate(v) for k, v in entry["arguments"].items()}
    except (ValueError, TypeError, SyntaxError, KeyError, AttributeError):
        return None


def remember(targets: Iterable[str]) -> None:
    """Write the entries of ``targets`` that are missing or differ from what their classes
    say now (out of date, or edited by hand); their classes are imported already (the full
    check has read their signatures). A cache that cannot be written (a read-only install)
    is left as it is: the light check then does less."""
    read = {t: e for t, e in generate(targets).items() if e.get("files")}  # imported ones
    read = {t: e for t, e in read.items() if signatures().get(t) != e}
    if not read:
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=FILE.parent, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({**signatures(), **read}, f, indent=1, sort_keys=True)
        os.replace(tmp, FILE)  # whole or not at all: ranks and sweep jobs write at once
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        return
    signatures.cache_clear()


def write() -> None:
    """Every target configs/ names, imported here (about 10 s): what make install runs."""
    from hydra.utils import get_object

    for target in configured_targets():
        try:
            get_object(target)
        except Exception:  # an optional package not installed: no entry
            pass
    remember(configured_targets())
    print(f"wrote {FILE}")
