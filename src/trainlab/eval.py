"""Evaluation: test a checkpoint on the test split of the data it was trained on.

``python eval.py ckpt_path=<ckpt>`` at the repo root calls ``main`` here. The data and
model configs come from the checkpoint's run dir (``<run_dir>/config.yaml``), so the
architecture always matches the weights.
"""

import time
from pathlib import Path

import hydra
import lightning as L
from omegaconf import DictConfig, OmegaConf, open_dict

from trainlab.train import CONFIGS
from trainlab.utils.config_checks import check_config
from trainlab.utils.console import print_summary
from trainlab.utils.errors import UserError
from trainlab.utils.instantiate import finish_wandb, instantiate_loggers
from trainlab.utils.results import batch_facts, final_metrics, write_metrics_json
from trainlab.utils.run_dir import guard, is_global_zero, record
from trainlab.utils.task import run_task


def train_config_of(ckpt: Path) -> DictConfig:
    """The config of the run that wrote ``ckpt`` (``<run_dir>/checkpoints/<ckpt>``)."""
    path = ckpt.resolve().parent.parent / "config.yaml"
    if not path.exists():
        raise UserError(f"no config.yaml next to {ckpt.parent}: expected it at {path}")
    return OmegaConf.load(path)


def evaluate(cfg: DictConfig) -> dict[str, float]:
    start = time.monotonic()
    ckpt = Path(cfg.ckpt_path)
    if not ckpt.is_file():
        raise UserError(
            f"ckpt_path={cfg.ckpt_path} does not exist: pass a .ckpt file from a run dir"
        )
    train_cfg = train_config_of(ckpt)
    run_dir = Path(cfg.paths.output_dir)
    if is_global_zero():
        guard(run_dir)
    # Re-resolve the training run's data/model against this run's paths and config.
    with open_dict(cfg):
        cfg.data, cfg.model = train_cfg.data, train_cfg.model
        if "init_from" in cfg.model:  # the checkpoint holds the weights; skip the start file
            cfg.model.init_from = None
    check_config(cfg)
    if is_global_zero():
        record(run_dir, cfg)
    L.seed_everything(cfg.seed, workers=True)

    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.check()
    model = hydra.utils.instantiate(cfg.model)
    loggers = instantiate_loggers(cfg.get("logger"), run_dir)
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, logger=loggers or False)
    try:
        trainer.test(model, datamodule=datamodule, ckpt_path=str(ckpt))
    finally:
        finish_wandb(loggers)
    metrics = final_metrics(trainer)
    if trainer.is_global_zero:
        run = {
            "run_dir": str(run_dir),
            "wall_seconds": round(time.monotonic() - start, 2),
            **batch_facts(trainer, datamodule.eval_batch_size),
        }
        path = write_metrics_json(
            run_dir, metrics=metrics, checkpoints={"evaluated": str(ckpt)}, run=run
        )
        print_summary("eval summary", {"checkpoint": ckpt, "metrics.json": path, **metrics})
    return metrics


@hydra.main(version_base="1.3", config_path=CONFIGS, config_name="eval")
def main(cfg: DictConfig) -> dict[str, float]:
    return run_task(evaluate, cfg)
