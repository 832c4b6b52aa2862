"""The labelled set the end-of-run table rates the frozen features on: the run's own data, or
``features.data``, a data config's name (``fashion_mnist``, ``mnist5k``) or a labelled folder
(``root/train/<class>/*`` and ``root/val/<class>/*``, read as data=imagefolder).

A run on unlabelled photos (data=folder) is rated on a labelled set of the user's choice: a
few hundred labelled images of their own, or a public set. The set is read at the run's image
size, through its own normalisation; its channels must be the encoder's.
"""

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from trainlab.utils.errors import DataError
from trainlab.utils.source import CONFIGS

#: Why a run without labels and without features.data has no table.
NO_LABELS = (
    "data={name} has no labels and features.data names no labelled set: features.data=<a "
    "data config, or a folder of train/<class>/ and val/<class>/> rates them"
)


def rating_config(cfg: DictConfig) -> DictConfig | None:
    """The data node of ``features.data`` at the run's image size, batch and workers, its
    paths the run's; None where the key is not set."""
    name = OmegaConf.select(cfg, "features.data")
    if name is None:
        return None
    name = str(name)
    folder = "/" in name or Path(name).is_dir()
    overrides = (
        ["data=imagefolder", f"data.root={Path(name).resolve()}"] if folder else [f"data={name}"]
    )
    try:
        composed = composed_train(overrides)
    except HydraException as error:  # no such data config
        raise DataError(
            f"features.data={name}: {type(error).__name__}: {str(error).splitlines()[0]}; "
            "name a file of configs/data/ or a labelled folder"
        ) from None
    rating = OmegaConf.create(OmegaConf.to_container(cfg))  # the run's paths resolve in it
    rating.data = composed.data
    for key in ("image_size", "batch_size", "num_workers"):
        rating.data[key] = cfg.data[key]
    if rating.data.in_chans != cfg.data.in_chans:
        raise DataError(
            f"features.data={name} has {rating.data.in_chans} channel(s) and the encoder reads "
            f"{cfg.data.in_chans}: name a labelled set of {cfg.data.in_chans} channel(s)"
        )
    return rating.data


def composed_train(overrides: list[str]) -> DictConfig:
    """configs/train.yaml with ``overrides``, by Hydra's compose: within the command's Hydra,
    or, in a child rank (which runs without Hydra), from configs/ itself."""
    if GlobalHydra.instance().is_initialized():
        return compose("train", overrides=overrides)
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        return compose("train", overrides=overrides)


def check_rating_data(cfg: DictConfig) -> None:
    """Before the run: a features.data that names nothing, or a set of other channels, is
    refused in one line, not after the training."""
    if OmegaConf.select(cfg, "features.enabled") and (node := rating_config(cfg)) is not None:
        instantiate(node).check()


def rating_data(cfg: DictConfig, datamodule, strategy=None):
    """The data module the table rates on: features.data's, else the run's where it has
    labels (a DataError where it has none). ``strategy``: rank 0 fetches a missing set while
    the other ranks wait."""
    node = rating_config(cfg)
    if node is None:
        if datamodule.num_classes is None:
            raise DataError(NO_LABELS.format(name=datamodule.name))
        return datamodule
    rating = instantiate(node)
    if strategy is None or strategy.is_global_zero:
        rating.prepare_data()
    if strategy is not None:
        strategy.barrier()
    rating.check()
    return rating
