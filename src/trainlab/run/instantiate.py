"""Build callbacks, loggers and the strategy from their config groups."""

import secrets
from pathlib import Path

import hydra
from lightning.pytorch import Callback
from lightning.pytorch.loggers import Logger, WandbLogger
from omegaconf import DictConfig


def _targets(cfg: DictConfig | None):
    """The ``_target_`` entries of a group that holds several named ones (null = off)."""
    for name, node in (cfg or {}).items():
        if isinstance(node, DictConfig) and "_target_" in node:
            yield name, node


def instantiate_callbacks(cfg: DictConfig | None) -> list[Callback]:
    return [hydra.utils.instantiate(node) for _, node in _targets(cfg)]


def instantiate_loggers(cfg: DictConfig | None, run_dir: Path) -> list[Logger]:
    loggers = []
    for _, node in _targets(cfg):
        if node._target_.endswith("WandbLogger") and node.get("id") is None:
            # One W&B run per run dir: a resumed run continues the same W&B run.
            loggers.append(hydra.utils.instantiate(node, id=wandb_run_id(run_dir)))
        else:
            loggers.append(hydra.utils.instantiate(node))
    return loggers


def wandb_run_id(run_dir: Path) -> str:
    path = run_dir / "wandb_id"
    if not path.exists():
        path.write_text(secrets.token_hex(4))  # W&B ids are short lowercase strings
    return path.read_text().strip()


def finish_wandb(loggers: list[Logger]) -> None:
    """Close the W&B run, or the next job of a multirun would log into this one."""
    if any(isinstance(lg, WandbLogger) for lg in loggers):
        import wandb

        wandb.finish()


def instantiate_strategy(cfg: DictConfig | None):
    """An empty strategy group means Lightning's ``"auto"``."""
    return hydra.utils.instantiate(cfg) if cfg and "_target_" in cfg else "auto"
