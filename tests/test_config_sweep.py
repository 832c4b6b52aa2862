"""Every number, boolean and list of every offline experiment's composed config, mutated (0,
-1, a huge number, a wrong type, a list one item short or long), through train.py in this
process. Each mutation either runs (exit 0) or is refused in one line that names its key
(exit 2), with no traceback and no run dir. No list of keys can find what this finds.

Hypothesis draws the mutations (derandomized: CI sees the same ones each time; a failure
shrinks to one override). make test-slow runs a sample of 6, then 100; make test none."""

import functools
import itertools
from pathlib import Path

import pytest
from conftest import DIGITS, FAST, compose_cfg, experiments_on, run_in_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

import trainlab.commands

# Where a mutation says nothing about the config: where runs and logs go, Hydra's own node.
SKIP = ("hydra.", "paths.", "logger.", "run_name", "task_name")
RUN = [*FAST, "trainer.max_steps=1", "test=false"]


def leaves(node, path=""):
    """(dotted key, value) of every number, boolean and list of scalars written in the
    config (interpolations are strings: left to the key they point at)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        if node and all(isinstance(v, (int, float, str)) for v in node):
            yield path, node
    elif isinstance(node, (int, float)):
        yield path, node


def mutations(value) -> list:
    if isinstance(value, bool):
        return ["maybe", 2]
    if isinstance(value, list):
        wrong_type = ["abc"] * len(value)
        return [value[:-1], [*value, value[-1]], wrong_type]
    if isinstance(value, int):  # no huge ints: a depth or batch of 10**9 is a real request
        return [0, -1, 1.5, "abc"]
    return [0, -1, 1.0e30, "abc", float("inf")]


def written(value) -> str:
    if isinstance(value, list):
        return "[" + ",".join(written(v) for v in value) + "]"
    if isinstance(value, float):
        return "inf" if value == float("inf") else repr(value)
    return str(value)


def experiments() -> list[str]:
    """The default job and every experiment on the embedded digits, found in configs/experiment
    (the others' data must be downloaded first, or loads for seconds: every mutation there
    would be refused for the data, or cost minutes, and say nothing)."""
    return ["default", *experiments_on(DIGITS)]


@functools.cache
def cases() -> list[tuple[str, str, str]]:
    """(experiment, key, mutated value) of every leaf of every offline experiment: composed
    when a sweep draws its first case, not when make test collects the file."""
    out = []
    for experiment in experiments():
        chosen = [] if experiment == "default" else [f"experiment={experiment}"]
        cfg = compose_cfg(Path("unused"), [*chosen, *RUN])  # composing writes nothing
        plain = OmegaConf.to_container(cfg, resolve=False)
        for key, value in leaves(plain):
            if not key.startswith(SKIP):
                out += [(experiment, key, written(m)) for m in mutations(value)]
    return out


counter = itertools.count()


def run_mutation(root: Path, experiment: str, key: str, value: str, capfd):
    run_name = f"m{next(counter)}"
    argv = ["train.py", *RUN, f"paths.log_dir={root}", f"run_name={run_name}"]
    if experiment != "default":
        argv.append(f"experiment={experiment}")
    override = f"{key}={value}"
    capfd.readouterr()
    with pytest.MonkeyPatch.context() as monkeypatch:  # one per example, not per test
        code = run_in_process(trainlab.commands.train_command, [*argv, override], monkeypatch)
    err = capfd.readouterr().err
    assert "Traceback" not in err, f"{experiment} {override}: a traceback\n{err[-3000:]}"
    assert code in (0, 2), f"{experiment} {override}: exit {code}\n{err[-3000:]}"
    if code == 2:
        lines = [line for line in err.splitlines() if line.startswith("error")]
        assert len(lines) == 1, f"{experiment} {override}: {lines}"
        assert key.rsplit(".", 1)[-1] in lines[0], f"{experiment} {override}: {lines[0]}"
        assert not (root / "train" / "runs" / run_name).exists(), f"{override}: a run dir"


def sweep(examples: int):
    def decorate(test):
        return settings(
            max_examples=examples,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )(given(case=st.deferred(lambda: st.sampled_from(cases())))(test))

    return decorate


@pytest.mark.slow  # 11 s; the 100-mutation sweep is slow too: make test-slow, which CI runs
@sweep(6)
def test_a_sample_of_mutations_runs_or_is_refused_naming_the_key(case, tmp_path_factory, capfd):
    run_mutation(tmp_path_factory.getbasetemp() / "sweep", *case, capfd)


# 100 of the 3,564 cases, the same ones each run: 2.9 minutes on a 2-core AVX2 CPU. More would
# leave .ci/run (both stacks, make test and test-slow) too thin a margin in CI's 90 minutes.
@pytest.mark.slow
@sweep(100)
def test_100_mutations_across_the_experiments_run_or_are_refused_naming_the_key(
    case, tmp_path_factory, capfd
):
    run_mutation(tmp_path_factory.getbasetemp() / "sweep_all", *case, capfd)


@pytest.mark.slow  # a check of the slow sweeps' cases, which make test does not compose
def test_the_sweep_covers_every_offline_experiment_and_enough_leaves():
    assert {c[0] for c in cases()} == set(experiments())
    assert len(cases()) >= 500, len(cases())
