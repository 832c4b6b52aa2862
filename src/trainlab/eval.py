"""Evaluation of a checkpoint, in one of two modes.

``python eval.py ckpt_path=<ckpt>`` (mode=test): the checkpoint's model on the test split of
the data it was trained on. ``python eval.py mode=features ckpt_path=<ckpt>``: its frozen
encoder rated by the feature protocol (trainlab.evaluation) next to raw pixels and a random
encoder. The data and model configs come from the checkpoint's run dir
(``<run_dir>/config.yaml``), so the architecture always matches the weights; ``data=<name>``
rates on other data, ``+data.<key>=<value>`` changes one key of the checkpoint's data, and
``model=ijepa model.encoder...`` describes weights that have no run dir (official, timm).
"""

import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from trainlab.checks.checkpoint_config import (
    INPUT_FORMAT,
    config_path,
    copy_unless_given,
    run_config_of,
)
from trainlab.checks.config import check_config, refuse_home_tildes
from trainlab.checks.copied_run import confine_data, confine_encoder, confine_model
from trainlab.checks.hydra_errors import one_line_hydra_errors
from trainlab.commands import CONFIGS
from trainlab.run.failures import run_task
from trainlab.run.run_dir import (
    guard,
    hold_log_records,
    is_global_zero,
    open_run,
    refuse_writes_into_other_runs,
)
from trainlab.utils.errors import UserError
from trainlab.utils.files import not_a_file
from trainlab.utils.logging import get_logger, one_console_line

# torch, Lightning and the evaluation code are imported inside the functions that run the
# evaluation, after the checks that need none of them: a refusal costs a second, not ten.

log = get_logger(__name__)


def copied_run_config(cfg: DictConfig, ckpt: Path) -> DictConfig | None:
    """The config of the run that wrote ``ckpt`` (``<run_dir>/checkpoints/<ckpt>``), or None
    where there is none; its data and model, where this command takes them, confined to
    shapes and formats (checks/copied_run.py): a copied run dir reaches no network."""
    train_cfg = run_config_of(ckpt)
    if train_cfg is None:
        return None
    data, model, test = cfg.get("data"), cfg.get("model"), cfg.mode == "test"
    with open_dict(train_cfg):
        if test or data is None or "_target_" not in data:
            confine_data(train_cfg.data, command_line_data_keys(), str(config_path(ckpt)))
        if test or model is None:
            confine_model(train_cfg.model, str(config_path(ckpt)))
            encoder = train_cfg.model.get("encoder") or OmegaConf.select(
                train_cfg.model, "net.encoder"
            )
            if isinstance(encoder, DictConfig):
                confine_encoder(encoder, "model.encoder", str(config_path(ckpt)))
    return train_cfg


def merged_config(cfg: DictConfig, ckpt: Path, train_cfg: DictConfig | None) -> DictConfig:
    """Data and model of the checkpoint's run, unless the command line chose them. The
    checkpoint's input format (INPUT_FORMAT) is kept when data=<other> replaces its data."""
    path = config_path(ckpt)
    data, model = cfg.get("data"), cfg.get("model")
    if train_cfg is None and (data is None or model is None or "_target_" not in data):
        raise UserError(
            f"{ckpt} has no run dir config ({path}): choose data=<name> and model=ijepa "
            "with model.encoder.size/patch_size/img_size of the weights"
        )
    given = command_line_data_keys()
    with open_dict(cfg):
        if data is None or "_target_" not in data:  # +data.key=value patches the run's data
            cfg.data = OmegaConf.merge(train_cfg.data, data or {})
        elif train_cfg is not None:
            copy_unless_given(cfg.data, train_cfg.data, INPUT_FORMAT, given, "data")
        cfg.model = model if model is not None else train_cfg.model
        if "init_from" in cfg.model:  # the checkpoint holds the weights; skip the start file
            cfg.model.init_from = None
    return cfg


def command_line_data_keys() -> set[str]:
    """``data.<key>`` names the command line set."""
    return {
        o.split("=")[0].lstrip("+")
        for o in HydraConfig.get().overrides.task
        if o.lstrip("+").startswith("data.")
    }


def rate_features(cfg: DictConfig, ckpt: Path, state: dict, start: float) -> dict:
    """mode=features: the feature protocol's table for the checkpoint's frozen encoder
    (``state``: the checkpoint memory-mapped, to refuse a part it lacks before a run dir)."""
    import torch

    from trainlab.evaluation.checkpoint import (
        bounded_splits,
        print_ratings,
        rate_checkpoint,
        ratings_title,
    )
    from trainlab.evaluation.features import Extraction
    from trainlab.evaluation.protocol import choices
    from trainlab.evaluation.protocol import metrics as protocol_metrics
    from trainlab.evaluation.rating_data import rating_data
    from trainlab.run.metrics_file import report

    encoder_cfg = cfg.model.get("encoder") or OmegaConf.select(cfg.model, "net.encoder")
    if encoder_cfg is None:
        raise UserError(
            f"mode=features rates a ViT encoder, and {ckpt} is a {cfg.model._target_} without "
            "one: evaluate it with mode=test"
        )
    from trainlab.evaluation.checkpoint import evaluated_part
    from trainlab.networks.weights import network_parts

    part = evaluated_part(network_parts(state), cfg.features.init_part, str(ckpt))
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.check()
    datamodule = rating_data(cfg, datamodule)  # features.data's, or the run's with labels
    run_dir = open_run(cfg)  # after the checks: a refused run writes nothing
    # One process, on the first GPU where there is one (the loader's workers as the data's).
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    how = Extraction(
        device=device,
        batch_size=datamodule.eval_batch_size,
        num_workers=datamodule.num_workers,  # data.num_workers, at most the usable cores
    )
    bounds = [cfg.features.get(k) for k in ("train_per_class", "eval_per_class")]
    datasets = bounded_splits(datamodule, *bounds, cfg.seed)
    sizes = {k: len(v) for k, v in datasets.items()}
    rated = time.monotonic()
    ratings = rate_checkpoint(
        encoder_cfg,
        str(ckpt),
        datamodule,
        part,
        cfg.features.baselines,
        cfg.seed,
        how,
        *bounds,
        cfg.features.get("knn_k", 20),
        datasets,
    )
    metrics = protocol_metrics(ratings)
    seconds = round(time.monotonic() - rated, 1)
    print_ratings(ratings, ratings_title(str(ckpt), datamodule.name, sizes, 1, seconds))
    report(
        "eval summary",
        run_dir,
        metrics,
        {"checkpoint": ckpt},
        chosen=choices(ratings),
        checkpoints={"evaluated": str(ckpt), "part": part},
        run={"run_dir": str(run_dir), "wall_seconds": round(time.monotonic() - start, 2)},
    )
    return metrics


def evaluate(cfg: DictConfig) -> dict[str, float]:
    start = time.monotonic()
    refuse_home_tildes(cfg)  # before the checkpoint's check would call it missing
    ckpt = Path(cfg.ckpt_path)
    if what := not_a_file(ckpt):
        raise UserError(f"ckpt_path={cfg.ckpt_path} {what}: pass a .ckpt file from a run dir")
    if cfg.mode not in ("test", "features"):
        raise UserError(f"mode={cfg.mode} is not a mode: use mode=test or mode=features")
    # A planted or damaged config.yaml: refused before any import.
    train_cfg = copied_run_config(cfg, ckpt)
    import lightning as L

    from trainlab.networks.weights import check_readable
    from trainlab.run.instantiate import finish_wandb, instantiate_loggers
    from trainlab.run.metrics_file import batch_facts, final_metrics, report
    from trainlab.trainer.matmul_precision import set_matmul_precision

    one_console_line()  # once Lightning is imported: it adds its own console handler then
    state = check_readable(ckpt)  # truncated, not a checkpoint, or a pickle that would run code
    if cfg.mode == "features":
        cfg = merged_config(cfg, ckpt, train_cfg)
        L.seed_everything(cfg.seed)
        return rate_features(cfg, ckpt, state, start)
    if train_cfg is None:
        raise UserError(f"no config.yaml next to {ckpt.parent}: expected it at {config_path(ckpt)}")
    if is_global_zero():
        guard(Path(cfg.paths.output_dir))  # before the checks, as a refused run writes nothing
        refuse_writes_into_other_runs(cfg)
    # Re-resolve the training run's data/model against this run's paths and config.
    with open_dict(cfg):
        cfg.data, cfg.model = train_cfg.data, train_cfg.model
        if "init_from" in cfg.model:  # the checkpoint holds the weights; skip the start file
            cfg.model.init_from = None
    check_config(cfg)
    L.seed_everything(cfg.seed, workers=True)

    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.check()
    run_dir = open_run(cfg)  # after the checks: a refused run writes nothing
    model = hydra.utils.instantiate(cfg.model)
    loggers = instantiate_loggers(cfg.get("logger"), run_dir)
    set_matmul_precision(cfg.matmul_precision)
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, logger=loggers or False)
    try:
        # weights_only, as train.py: a checkpoint restores tensors and plain values, never
        # code. verbose=False: the eval summary shows the metrics, Lightning's table again.
        trainer.test(
            model, datamodule=datamodule, ckpt_path=str(ckpt), weights_only=True, verbose=False
        )
    finally:
        finish_wandb(loggers)
    metrics = final_metrics(trainer)
    if trainer.is_global_zero:
        run = {
            "run_dir": str(run_dir),
            "wall_seconds": round(time.monotonic() - start, 2),
            **batch_facts(trainer, datamodule.eval_batch_size),
        }
        checkpoints = {"evaluated": str(ckpt)}
        report(
            "eval summary", run_dir, metrics, {"checkpoint": ckpt}, checkpoints=checkpoints, run=run
        )
    return metrics


@one_line_hydra_errors
@hydra.main(version_base="1.3", config_path=CONFIGS, config_name="eval")
def main(cfg: DictConfig) -> dict[str, float]:
    hold_log_records()  # eval.log opens only once the run is accepted
    return run_task(evaluate, cfg)
