"""Facts about trainlab's own code read from its source files, without importing anything:
a config read from disk is judged by these before any of its names is imported."""

import ast
import functools
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # src/trainlab
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def module_file(module: str) -> Path | None:
    """The source file of ``trainlab.<...>``, or None where there is none."""
    parts = module.split(".")
    if parts[0] != PACKAGE.name or not all(NAME.fullmatch(p) for p in parts):
        return None
    folder = PACKAGE.joinpath(*parts[1:])
    for path in (folder.with_suffix(".py"), folder / "__init__.py"):
        if path.is_file() and path.resolve().is_relative_to(PACKAGE):
            return path
    return None


@functools.cache
def defines_class(target: str) -> bool:
    """Whether ``target`` (``trainlab.pkg.module.Class``) is a class written at the top level
    of that module of trainlab: an attribute path through a module's imports
    (``trainlab.run.run_dir.logging.FileHandler``) or a function is not."""
    module, _, name = target.rpartition(".")
    path = module_file(module) if NAME.fullmatch(name) else None
    if path is None:
        return False
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(isinstance(node, ast.ClassDef) and node.name == name for node in tree.body)


CONFIGS = PACKAGE.parents[1] / "configs"
TARGET_LINE = re.compile(r"^\s*_target_:\s*([\w.]+)\s*$", re.MULTILINE)


@functools.cache
def configured_targets() -> frozenset[str]:
    """Every ``_target_`` written in configs/."""
    return frozenset(
        match for path in CONFIGS.rglob("*.yaml") for match in TARGET_LINE.findall(path.read_text())
    )
