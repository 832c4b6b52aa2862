"""Say what the command line does not: values it changes that the user may not expect.

- ``python train.py data=mnist`` keeps the default experiment, and an experiment's values
  win over its groups' defaults: the run would silently train at the experiment's image
  size. Hydra composes this correctly; it just does not say so.
- ``resume=true`` continues a run from its checkpoint with the config of this command. Keys
  that differ from the run's own config.yaml are named; those that would make it another
  run (model, data, optimizer, seed) are refused.
"""

from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from trainlab.utils.errors import ConfigError

UNSET = "<unset>"
# What a resumed run may change: how long and where it runs, what it logs, saves and rates.
RESUME_MAY_CHANGE = (
    "trainer.",
    "strategy.",
    "launcher.",
    "callbacks.",
    "logger.",
    "extras.",
    "paths.",
    "features.",
    "test",
    "resume_from",
    "tags",
    "compile",
    "matmul_precision",
    "memory_fit.",  # the device may differ; the run keeps the choice its run dir records
    "data.num_workers",
    "data.pin_memory",
    "data.persistent_workers",
    "data.root",
    "data.cache_dir",
    "data.endpoint_url",
)


def _leaves(node, prefix: str) -> list[str]:
    if isinstance(node, DictConfig):
        return [leaf for k, v in node.items() for leaf in _leaves(v, f"{prefix}.{k}")]
    return [f"{prefix}={OmegaConf.to_container(node) if isinstance(node, ListConfig) else node}"]


def _experiment_values(configs: Path, name: str) -> DictConfig:
    """An experiment file's own values merged over those of the experiments it extends."""
    node = OmegaConf.load(configs / "experiment" / f"{name}.yaml")
    merged = OmegaConf.create()
    for entry in node.pop("defaults", []):
        if isinstance(entry, str) and entry != "_self_":  # another experiment it extends
            merged = OmegaConf.merge(merged, _experiment_values(configs, entry))
    return OmegaConf.merge(merged, node)


def experiment_changes(configs: Path, choices: dict, task_overrides: list[str]) -> list[str]:
    """One line per group chosen on the command line whose values the experiment sets."""
    experiment = choices.get("experiment")
    if not experiment:
        return []
    values = _experiment_values(configs, experiment)
    given = dict.fromkeys(override.split("=", 1)[0].lstrip("+~") for override in task_overrides)
    lines = []
    for group in given:
        if group in choices and group != "experiment" and isinstance(values.get(group), DictConfig):
            # a key the command line sets itself is not changed behind the user's back
            leaves = _leaves(values[group], group)
            if not (keys := ", ".join(x for x in leaves if x.split("=")[0] not in given)):
                continue
            lines.append(
                f"experiment={experiment} changes {group}={choices[group]} from the command "
                f"line: {keys} (without an experiment the group's own values apply)"
            )
    return lines


def flat_leaves(node, prefix: str = "") -> dict[str, object]:
    """Dotted key -> leaf value of a plain container (lists are leaves)."""
    if isinstance(node, dict):
        return {
            k: v
            for key, val in node.items()
            for k, v in flat_leaves(val, f"{prefix}{key}.").items()
        }
    return {prefix[:-1]: node}


def resume_changes(saved: DictConfig, cfg: DictConfig) -> list[str]:
    """``key: old -> new`` for each key of ``cfg`` that differs from the run's ``saved``
    config (unresolved, as config.yaml holds it); a ConfigError names any key a resumed
    run cannot take."""
    old = flat_leaves(OmegaConf.to_container(saved))
    new = flat_leaves(OmegaConf.to_container(cfg))
    # How every resume is asked for, not a change: resume=true, and the run's name (saved as
    # ${now:...} when the first command did not name the run).
    keys = (old.keys() | new.keys()) - {"resume", "run_name"}
    changed = sorted(k for k in keys if old.get(k, UNSET) != new.get(k, UNSET))
    refused = [k for k in changed if not k.startswith(RESUME_MAY_CHANGE)]
    if refused:
        shown = ", ".join(f"{k}={new.get(k, UNSET)} (run: {old.get(k, UNSET)})" for k in refused)
        raise ConfigError(
            f"resume=true continues a run with its own model, data and optimizer, but {shown}: "
            "drop these overrides to resume, or start a new run (another run_name)"
        )
    return [f"{k}: {old.get(k, UNSET)} -> {new.get(k, UNSET)}" for k in changed]
