"""A fork adds a method as the README says, and nothing else changes: BYOL
(tests/fixtures/fork_byol: its LightningModule and its two configs) copied into a copy of
the project passes the method kit there, fast and slow, with the README's command, and no
make target or generated file is needed."""

import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, copy_of_the_tree, python_of_the_copy

FORK = ROOT / "tests" / "fixtures" / "fork_byol"
COPIED = ["src", "configs", "tests", "train.py", "eval.py", "pyproject.toml"]
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


def new_files() -> list[str]:
    return sorted(str(p.relative_to(FORK)) for p in FORK.rglob("*") if p.is_file())


def test_the_docs_count_the_files_the_fork_adds():
    """README and docs/fork.md say how many files a method is: the fork's count."""
    claims = [
        (doc, word)
        for doc in ("README.md", "docs/fork.md")
        for word in re.findall(r"\b(\w+) new files", (ROOT / doc).read_text(), re.IGNORECASE)
    ]
    assert claims, "the docs no longer say how many files a new method is"
    for doc, word in claims:
        assert NUMBERS[word.lower()] == len(new_files()), (doc, word, new_files())


def test_the_contract_is_eight_names_that_exist():
    """docs/fork.md lists a method's contract once, at most 8 names, each one there."""
    from trainlab.model.self_supervised import SelfSupervised
    from trainlab.networks import gather

    text = (ROOT / "docs" / "fork.md").read_text()
    section = text.split("**The contract: eight names.**", 1)[1].split("\n\n", 2)[1]
    names = [n.strip() for n in re.findall(r"^\| \d \| `?([\w ]+)", section, re.M)]
    assert 1 <= len(names) <= 8, names
    for name in names[1:]:
        found = hasattr(SelfSupervised, name) or hasattr(gather, name)
        assert found or name == "range annotations", name


@pytest.mark.slow  # the kit's 2-rank step, a SIGTERM resume and a 2-rank train.py run
@pytest.mark.timeout(1200)  # two pytest runs in the fork, up to 900 s each
def test_a_forked_method_passes_the_method_kit_with_no_other_edit(tmp_path):
    fork = tmp_path / "fork"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "fork_byol")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, fork / name, ignore=skip)
        else:
            shutil.copy2(source, fork / name)
    for path in new_files():
        assert not (fork / path).exists(), f"{path} is not new"
        (fork / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(FORK / path, fork / path)
    env = {**os.environ, "PYTHONPATH": str(fork / "src"), "WANDB_MODE": "offline"}
    # the README's command, fast then slow; the fork's trainlab is the one imported
    for marks in ([], ["-m", "slow"]):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *marks,
             "tests/test_method_kit.py", "-k", "[byol_digits]"],
            cwd=fork, env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert re.search(r"\b[1-9]\d* passed", done.stdout) and "failed" not in done.stdout


@pytest.mark.slow  # a 2-job sweep and a run in the renamed copy: about a minute
def test_the_rename_one_liner_leaves_a_project_that_sweeps(tmp_path):
    """docs/fork.md's rename in a copy: no file names trainlab after it, the package and
    both Hydra plugins answer to the new name, and a sweep (the checked sweeper) runs."""
    (line,) = re.findall(r"^NEW=.*$", (ROOT / "docs" / "fork.md").read_text(), re.M)
    fork = copy_of_the_tree(tmp_path / "fork")
    subprocess.run(["bash", "-c", line], cwd=fork, check=True)
    left = subprocess.run(["git", "grep", "-lI", "trainlab"], cwd=fork, capture_output=True,
                          text=True).stdout  # fmt: skip
    assert left == "", left
    assert sorted(p.name for p in (fork / "src" / "hydra_plugins").iterdir()) == [
        "mylab_checked", "mylab_optuna"
    ]  # fmt: skip
    python = python_of_the_copy(fork)
    where = (
        "import importlib.util as u; print(u.find_spec('mylab').origin, u.find_spec('trainlab'))"
    )
    found = subprocess.run([python, "-c", where], capture_output=True, text=True, check=True)
    assert found.stdout.split() == [str(fork / "src" / "mylab" / "__init__.py"), "None"]
    sweep = [str(python), "train.py", "-m", "seed=1,2", "features.enabled=false",
             "trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
             "test=false", f"paths.log_dir={tmp_path / 'logs'}"]  # fmt: skip
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(sweep, cwd=fork, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(list((tmp_path / "logs").rglob("metrics.json"))) == 2
