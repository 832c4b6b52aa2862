"""Imports only go down: each package of src/trainlab on a floor, and no module imports from a
package on a higher floor (read from the source, not by importing it)."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "trainlab"
# Lowest first. A package imports from its own floor or the floors below it.
FLOORS = [
    ["utils"],
    ["optim", "data"],
    ["networks", "losses"],
    ["evaluation"],
    ["model"],
    ["callbacks", "logger", "strategy", "trainer", "memory_fit", "compiler", "launcher"],
    ["run"],  # the steps of a run: its dir, batch, Trainer, fit, summary
    ["checks"],  # they read run dirs and batch sizes
    # entry points (training: the path that calls check(cfg), then run/'s steps), the package
    ["commands", "eval", "training", "child_rank", "runs", "trainlab"],
]
FLOOR = {name: i for i, names in enumerate(FLOORS) for name in names}


def package(module: str) -> str:
    """trainlab.networks.vit -> networks; trainlab.checks.preflight -> checks."""
    parts = module.split(".")[1:]
    return parts[0] if parts else "trainlab"


def imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trainlab"):
            yield node.module, node.lineno
        elif isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names if a.name.startswith("trainlab"))


def test_every_import_between_packages_goes_down_a_floor_or_stays():
    upward = []
    for path in SRC.rglob("*.py"):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        mine = package(module.removesuffix(".__init__"))
        assert mine in FLOOR, f"{path}: package {mine} has no floor in FLOORS"
        for target, line in imports(path):
            theirs = package(target)
            if FLOOR[theirs] > FLOOR[mine]:
                upward.append(f"{path.relative_to(SRC)}:{line} ({mine}) imports {target}")
    assert not upward, "\n".join(upward)
