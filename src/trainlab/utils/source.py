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
    return class_node(target) is not None


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def class_node(target: str) -> tuple[ast.ClassDef, ast.Module] | None:
    """The class statement of ``target`` at the top level of its module, with the module."""
    module, _, name = target.rpartition(".")
    path = module_file(module) if NAME.fullmatch(name) else None
    if path is None:
        return None
    tree = parsed(path)
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return (found[0], tree) if found else None


def class_string(target: str, attribute: str) -> str | None:
    """The string a class of trainlab assigns to ``attribute`` in its body (``monitor =
    "val/acc"``, or one name of a tuple assignment), else the first of its bases' that
    does: a base named in its module or imported into it by name. None where no class
    writes it so."""
    found = class_node(target)
    if found is None:
        return None
    node, tree = found
    for statement in node.body:
        pairs = []
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            names, values = statement.targets[0], statement.value
            if isinstance(names, ast.Tuple) and isinstance(values, ast.Tuple):
                pairs = list(zip(names.elts, values.elts, strict=False))
            else:
                pairs = [(names, values)]
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            pairs = [(statement.target, statement.value)]
        for name, value in pairs:
            if isinstance(name, ast.Name) and name.id == attribute:
                is_text = isinstance(value, ast.Constant) and isinstance(value.value, str)
                return value.value if is_text else None
    imported = {
        alias.asname or alias.name: f"{statement.module}.{alias.name}"
        for statement in tree.body
        if isinstance(statement, ast.ImportFrom) and statement.module
        for alias in statement.names
    }
    module = target.rpartition(".")[0]
    for base in node.bases:
        if isinstance(base, ast.Name):
            value = class_string(imported.get(base.id, f"{module}.{base.id}"), attribute)
            if value is not None:
                return value
    return None


CONFIGS = PACKAGE.parents[1] / "configs"
TARGET_LINE = re.compile(r"^\s*_target_:\s*([\w.]+)\s*$", re.MULTILINE)


@functools.cache
def configured_targets() -> frozenset[str]:
    """Every ``_target_`` written in configs/."""
    return frozenset(
        match for path in CONFIGS.rglob("*.yaml") for match in TARGET_LINE.findall(path.read_text())
    )
