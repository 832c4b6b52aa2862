"""The config of the run that wrote a checkpoint (``<run_dir>/config.yaml`` next to
``<run_dir>/checkpoints/``): probes, fine-tunes and ``eval.py`` take the encoder's shape and
input format from it, so the network always matches the weights it loads.
"""

from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from trainlab.checks.allowed_targets import check_targets
from trainlab.checks.copied_run import confine_encoder
from trainlab.run.run_yaml import read_run_yaml
from trainlab.utils.errors import ConfigError
from trainlab.utils.files import not_a_file
from trainlab.utils.logging import get_logger

log = get_logger(__name__)

# What the weights fix: the encoder's family and architecture (every key of its node but
# these, which only training sets) and the input it was trained on.
TRAINING_ONLY = ("drop_path_rate", "grad_checkpointing")
INPUT_FORMAT = ("image_size", "in_chans", "mean", "std")
PREDICTOR_SHAPE = ("pred_dim", "depth", "num_heads")


def config_path(ckpt: str | Path) -> Path:
    return Path(ckpt).resolve().parent.parent / "config.yaml"


def run_config_of(ckpt: str | Path) -> DictConfig | None:
    """The run's config, or None for a checkpoint outside a run dir (official, timm files).
    A config.yaml there that is not a regular file (a FIFO would hang its reader) is
    refused: read as absent, the checkpoint's shape and input were silently not taken."""
    path = config_path(ckpt)
    if (what := not_a_file(path)) is None:
        return load_run_config(path)
    if what == "does not exist":
        return None
    raise ConfigError(
        f"{path} {what}: the run's config must be a regular file; replace it with the run's "
        "config.yaml, or use a checkpoint outside a run dir"
    )


def load_run_config(path: Path, check: bool = True) -> DictConfig:
    """A run dir's config.yaml, refused if it names a class trainlab's configs do not
    (checks/allowed_targets.py): a shared run dir must not run code when it is opened.
    ``check=False`` only where nothing of it is built (resume's comparison with the command
    line)."""
    cfg = read_run_yaml(path)  # size and aliases checked before it is parsed
    if check:
        check_targets(cfg, path)
    return cfg


def copy_unless_given(dst, src, keys, given: set[str], prefix: str) -> list[str]:
    """Copy ``keys`` of ``src`` into ``dst`` where they differ, except the ``<prefix>.<key>``
    the command line gave; returns the ``<prefix>.<key>=<value>`` it changed."""
    changed = []
    for key in keys:
        value = src.get(key)
        if value is not None and f"{prefix}.{key}" not in given and dst.get(key) != value:
            dst[key] = value
            changed.append(f"{prefix}.{key}={value}")
    return changed


def adopt_checkpoint_shape(cfg: DictConfig, given: list[str]) -> None:
    """``model.init_from`` set on a checkpoint of a trainlab run: copy the encoder (its
    family, from configs/model/encoder/, and shape), I-JEPA's predictor shape and the input
    format from that run, except keys given on the command line. The weights fix them all,
    and a predictor's head count changes no weight's shape: loaded under another count, the
    weights would compute another function without a word."""
    init_from = OmegaConf.select(cfg, "model.init_from")
    at = "model.net.encoder" if OmegaConf.select(cfg, "model.net") is not None else "model.encoder"
    encoder = OmegaConf.select(cfg, at)
    if not init_from or encoder is None:
        return
    run = run_config_of(init_from)
    if run is None:
        log.info(f"{init_from} has no run config: the encoder shape is this config's")
        return
    source = OmegaConf.select(run, "model.encoder") or OmegaConf.select(run, "model.net.encoder")
    if source is None:
        log.info(f"{config_path(init_from)} describes no encoder: the shape is this config's")
        return
    given_keys = {o.split("=", 1)[0].lstrip("+~") for o in given}
    confine_encoder(source, "model.encoder", str(config_path(init_from)))
    with open_dict(cfg):
        if source.get("_target_") != encoder.get("_target_"):  # another family: its node whole
            kept = {k: encoder[k] for k in TRAINING_ONLY if k in encoder and k in source}
            OmegaConf.update(cfg, at, OmegaConf.merge(source, kept), merge=False)
            encoder = OmegaConf.select(cfg, at)
            log.info(f"the encoder is the checkpoint's: {source.get('_target_')}")
        shape = [k for k in source if k not in TRAINING_ONLY and k != "_target_"]
        changed = copy_unless_given(encoder, source, shape, given_keys, at)
        predictor = OmegaConf.select(cfg, "model.predictor")
        source_predictor = OmegaConf.select(run, "model.predictor")
        if predictor is not None and source_predictor is not None:
            keys = [k for k in PREDICTOR_SHAPE if k in predictor]
            changed += copy_unless_given(
                predictor, source_predictor, keys, given_keys, "model.predictor"
            )
        changed += copy_unless_given(cfg.data, run.data, INPUT_FORMAT, given_keys, "data")
    if changed:
        log.info(f"from the checkpoint's run ({config_path(init_from)}): {', '.join(changed)}")
