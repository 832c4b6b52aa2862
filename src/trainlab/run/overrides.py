"""Say when the experiment changes a group that was chosen on the command line.

``python train.py data=mnist`` keeps the default experiment, and an experiment's values win
over its groups' defaults: the run would silently train at the experiment's image size.
Hydra composes this correctly; it just does not say so, hence this check.
"""

from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf


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
    lines = []
    for override in task_overrides:
        group = override.split("=", 1)[0].lstrip("+~")
        if group in choices and group != "experiment" and isinstance(values.get(group), DictConfig):
            keys = ", ".join(_leaves(values[group], group))
            lines.append(
                f"experiment={experiment} changes {group}={choices[group]} from the command "
                f"line: {keys} (without an experiment the group's own values apply)"
            )
    return lines
