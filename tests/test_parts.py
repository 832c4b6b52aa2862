"""The parts: each optional capability is a set of paths that docs/fork.md removes in one
`git rm -r` line, and nothing outside a part imports it, names its modules or chooses its
configs; the core reaches a part only through config (a `_target_`, a callbacks list, an
optional default, a command line). IMPORTED_TODAY lists the imports that still cross into a
part: it only shrinks, and a part named in it is not removable yet. The slow test removes
every removable part at once, by its line, in a copy of the project, and runs the fast suite
that remains there."""

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, copy_of_the_tree, python_of_the_copy

FORK = ROOT / "docs" / "fork.md"
ROW = re.compile(r"^\| (?P<name>[^|]+?) \|.*`git rm -r (?P<paths>[^`]+)`", re.M)
SCANNED = ["src", "tests", "scripts", "benchmarks", "research", "configs", "train.py", "eval.py"]
SUFFIXES = {".py", ".yaml", ".sh"}

#: (file, part) pairs of today's imports into a part from outside it. Only shrinks.
IMPORTED_TODAY: set[tuple[str, str]] = set()
#: A part that imports another: it goes with it (its page says so). part -> the parts it needs.
NEEDS = {
    "GPU check": {"DDP comm hooks", "memory fit", "I-JEPA", "throughput", "synthetic data"},
    "DDP comm hooks": {"I-JEPA", "classifier"},
    "FSDP2": {"I-JEPA"},
    "memory fit": {"I-JEPA"},
    "mask picture": {"I-JEPA"},
    "Optuna sweeper": {"run tables", "classifier"},
    "I-JEPA": {"predictor", "torch.compile", "throughput"},
    "MAE": {"predictor"},
}


def parts() -> dict[str, list[str]]:
    """Each part's paths, as its `git rm -r` line in docs/fork.md names them."""
    found = {m["name"]: m["paths"].split() for m in ROW.finditer(FORK.read_text())}
    assert found, "docs/fork.md lists no part"
    return found


def files_of(paths: list[str]) -> set[Path]:
    out = set()
    for path in paths:
        target = ROOT / path
        out |= {target} if target.is_file() else {p for p in target.rglob("*") if p.is_file()}
    return out


def module_of(path: Path) -> str | None:
    """The dotted name a Python file is imported by: src/ and the root are on the path, and
    so is tests/ (conftest, ddp_harness)."""
    rel = path.relative_to(ROOT)
    if rel.suffix != ".py":
        return None
    parts_ = list(rel.with_suffix("").parts)
    if parts_[0] in ("src", "tests"):
        parts_ = parts_[1:]
    if parts_[-1] == "__init__":
        parts_ = parts_[:-1]
    return ".".join(parts_) or None


def imported(path: Path) -> set[str]:
    """Every module a Python file imports, and its dotted names in strings (`_target_`s,
    monkeypatch targets); `from a import b` counts as a and a.b."""
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names |= set(DOTTED.findall(node.value))
    return names


DOTTED = re.compile(r"\b(?:trainlab|hydra_plugins|benchmarks)(?:\.\w+)+")


def references(path: Path) -> set[str]:
    if path.suffix == ".py":
        return imported(path)
    return set(DOTTED.findall(path.read_text()))


def config_files_named(path: Path) -> set[Path]:
    """The config files a yaml file's defaults list chooses (``- model_checkpoint``,
    ``- encoder: vit``, ``- override /model: mae``), its ``optional`` entries left out: an
    optional default is how the core reaches a part's config, and it goes with the part."""
    text = yaml.safe_load(path.read_text()) if path.suffix == ".yaml" else None
    found = set()
    for entry in (text.get("defaults") or []) if isinstance(text, dict) else []:
        key, option = (entry, entry) if isinstance(entry, str) else next(iter(entry.items()))
        if key == "_self_" or "optional" in key.split() or not isinstance(option, str):
            continue
        group = key.split()[-1].split("@")[0] if isinstance(entry, dict) else ""
        folder = ROOT / "configs" / group[1:] if group.startswith("/") else path.parent / group
        found.add(folder / f"{option}.yaml")
    return found


def crossings(extra: tuple[Path, ...] = ()) -> set[tuple[str, str]]:
    """(file, part) for every file outside a part that imports or names one of its modules,
    or chooses one of its config files in a defaults list; ``extra``: files to scan beside
    the project's."""
    table = parts()
    owned = {name: files_of(paths) for name, paths in table.items()}
    modules = {name: {m for f in files if (m := module_of(f))} for name, files in owned.items()}
    scanned = set()
    for entry in SCANNED:
        target = ROOT / entry
        scanned |= {target} if target.is_file() else set(target.rglob("*"))
    found = set()
    for path in [*sorted(p for p in scanned if p.suffix in SUFFIXES and p.is_file()), *extra]:
        names, configs = references(path), config_files_named(path)
        users = {user for user, files in owned.items() if path in files}
        for name, mods in modules.items():
            if name in users or any(name in NEEDS.get(user, ()) for user in users):
                continue
            if configs & owned[name] or any(
                n == m or n.startswith(m + ".") for n in names for m in mods
            ):
                found.add(
                    (
                        path.relative_to(ROOT).as_posix()
                        if path.is_relative_to(ROOT)
                        else str(path),
                        name,
                    )
                )
    return found


def test_every_part_names_paths_that_exist():
    """All of a part's paths, or none where its line has removed it; NEEDS names parts."""
    named = set(NEEDS).union(*NEEDS.values())
    assert named <= set(parts()), f"NEEDS names no part: {named - set(parts())}"
    for name, paths in parts().items():
        missing = [path for path in paths if not (ROOT / path).exists()]
        assert missing in ([], paths), f"docs/fork.md: part {name!r} names {missing}, not there"


def test_no_file_outside_a_part_imports_it():
    found = crossings()
    new = sorted(found - IMPORTED_TODAY)
    assert not new, "imported from outside its part (reach it through config): " + ", ".join(
        f"{file} -> {part}" for file, part in new
    )
    gone = sorted(IMPORTED_TODAY - found)
    assert not gone, f"no longer imported, drop from IMPORTED_TODAY: {gone}"


def test_the_scan_sees_an_import_of_a_part(tmp_path):
    """The check itself: a file outside the part that imports one of its modules is found
    (written outside the tree: no other test may copy or scan it)."""
    present = [(n, m) for n, paths in parts().items() for f in sorted(files_of(paths))
               if (m := module_of(f))]  # fmt: skip
    if not present:
        pytest.skip("every part is removed")
    name, module = present[0]
    probe = tmp_path / "probe.py"
    probe.write_text(f"import {module}\n")
    assert (str(probe), name) in crossings((probe,))


def test_the_scan_sees_a_part_config_chosen_by_a_defaults_list(tmp_path):
    """A config outside the part that chooses one of its files in a defaults list is found;
    the same entry marked ``optional`` is the seam, and is not."""
    configs = ROOT / "configs"
    present = [(n, f) for n, paths in parts().items() for f in sorted(files_of(paths))
               if f.suffix == ".yaml" and f.is_relative_to(configs) and f.parent != configs]  # fmt: skip
    if not present:
        pytest.skip("every part's configs are removed")
    name, config = present[0]
    group, option = config.parent.relative_to(configs).as_posix(), config.stem
    chosen, optional = tmp_path / "chosen.yaml", tmp_path / "optional.yaml"
    chosen.write_text(f"defaults:\n  - override /{group}: {option}\n")
    optional.write_text(f"defaults:\n  - optional /{group}@_here_: {option}\n")
    found = crossings((chosen, optional))
    assert (str(chosen), name) in found and (str(optional), name) not in found


@pytest.mark.slow
def test_removing_every_part_leaves_a_green_fast_suite(tmp_path):
    """In a copy of the tree, every removable part's `git rm -r` line, then the fast suite
    that remains, run by a Python that imports the copy's src/, not this checkout's."""
    copy = copy_of_the_tree(tmp_path / "fork")
    blocked = {part for _, part in IMPORTED_TODAY}
    for name, paths in parts().items():
        if name not in blocked:
            subprocess.run(["git", "rm", "-r", "--quiet", *paths], cwd=copy, check=True)
    result = subprocess.run(
        [python_of_the_copy(copy), "-m", "pytest", "-q", "-x", "-n", "2", "--dist", "loadscope",
         "-p", "no:cacheprovider"],
        cwd=copy, env={**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
