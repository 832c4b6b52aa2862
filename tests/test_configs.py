"""Every experiment composes, and its model, datamodule and trainer instantiate on CPU."""

import json
import re

import hydra
import pytest
import torch
from conftest import CONFIGS, EXPERIMENTS, ROOT, make_image_folder
from omegaconf import OmegaConf

from trainlab.checks.config import check_config


def test_there_are_experiments():
    assert {"vicreg_digits", "vicreg_mnist"} <= set(EXPERIMENTS)


def test_default_job_is_vicreg_on_digits_and_its_experiment_by_name(cfg_factory):
    """`python train.py` is experiment=vicreg_digits, its two views brought by model/vicreg.yaml."""
    cfg = cfg_factory()
    assert cfg.model._target_.endswith("VICReg") and cfg.data._target_.endswith("DigitsDataModule")
    assert cfg.trainer.accelerator == "auto" and cfg.optimized_metric == "val/probe_acc"
    assert len(cfg.data.views) == 2
    untagged = lambda c: {k: v for k, v in OmegaConf.to_container(c).items() if k != "tags"}  # noqa: E731
    assert untagged(cfg) == untagged(cfg_factory("experiment=vicreg_digits"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_instantiates(cfg_factory, tmp_path, experiment):
    # a folder experiment reads its channels and size from the folder
    where = (
        [f"data.root={make_image_folder(tmp_path / 'images')}"] if "_folder" in experiment else []
    )
    cfg = cfg_factory(f"experiment={experiment}", "trainer.accelerator=cpu", *where)
    check_config(cfg)
    assert cfg.data._target_ and cfg.model._target_
    datamodule = hydra.utils.instantiate(cfg.data)
    # Shapes only: ViT-H would cost seconds and gigabytes. MixUp's Beta distribution checks
    # its arguments with .item(), which meta tensors cannot answer.
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        with torch.device("meta"):
            model = hydra.utils.instantiate(cfg.model)
    finally:
        torch.distributions.Distribution.set_default_validate_args(True)
    trainer = hydra.utils.instantiate(cfg.trainer, logger=False)  # accelerator forced to cpu
    assert datamodule.batch_size > 0
    assert sum(p.numel() for p in model.parameters()) > 0
    assert trainer.max_epochs == cfg.trainer.max_epochs


@pytest.mark.parametrize("group", ["data", "logger", "callbacks", "trainer", "strategy", "debug"])
def test_every_option_of_a_group_composes(cfg_factory, tmp_path, group):

    for option in sorted(p.stem for p in (CONFIGS / group).glob("*.yaml")):
        overrides = [f"{group}={option}"]
        if group == "data" and option in ("imagefolder", "imagenet", "stream"):
            overrides.append("data.num_classes=10")
        if group == "data" and option == "folder":  # its channels and size: read from it
            overrides.append(f"data.root={make_image_folder(tmp_path / 'images')}")
        cfg = cfg_factory(*overrides)
        check_config(cfg)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["data.image_size=18"],
            r"model.encoder.img_size=18 \(data.image_size\) is not a multiple of model.encoder.patch_size=4",
        ),
        *(
            [
                (
                    ["experiment=linear_probe", "data.image_size=30"],
                    r"model.net.encoder.img_size=30 .*encoder.patch_size=4: set data.image_size to a multiple of 4 \(e.g. 28\)",
                )
            ]
            if "linear_probe" in EXPERIMENTS
            else []
        ),  # the classifier part
        (
            ["data.batch_size=0"],
            r"data.batch_size=0 is not valid: .* DigitsDataModule takes int >= 1",
        ),
        (["data.batch_size=-1"], r"data.batch_size=-1 is not valid: input should be greater"),
        (["data.global_batch_size=0"], r"data.global_batch_size=0 is not valid: input should"),
        (["+model.schedule_scale=0.5"], r"model.schedule_scale=0.5 would end the schedules"),
    ],
)
def test_values_that_cannot_work_are_refused_naming_the_key(cfg_factory, overrides, message):
    """Before this check, a patch size that does not divide the image failed deep in the model
    ("The size of tensor a (18) must match ...") and batch_size=0 in torch's DataLoader."""
    from trainlab.utils.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        check_config(cfg_factory(*overrides))


def test_num_classes_is_counted_from_the_folder_or_its_classes_json(cfg_factory, tmp_path):

    for split in ("train", "val"):
        for name in ("cat", "dog", "owl"):
            (tmp_path / "imgs" / split / name).mkdir(parents=True)
    (tmp_path / "imgs" / "train" / "notes.txt").write_text("not a class")
    cfg = cfg_factory("data=imagefolder", f"data.root={tmp_path / 'imgs'}")
    assert cfg.data.num_classes == 3
    assert (
        cfg_factory(
            "data=imagefolder", f"data.root={tmp_path / 'imgs'}", "data.num_classes=7"
        ).data.num_classes
        == 7
    )
    (tmp_path / "imgs" / "classes.json").write_text(json.dumps(["a", "b", "c", "d"]))
    assert cfg_factory("data=imagefolder", f"data.root={tmp_path / 'imgs'}").data.num_classes == 4


def test_vicreg_mnist_runs_bf16_only_on_a_cpu_with_bf16_instructions(cfg_factory, monkeypatch):
    import trainlab.trainer.cpu_precision as cpu_precision

    def precision(flags, cuda, *overrides):
        monkeypatch.setattr(cpu_precision, "cpu_flags", lambda: flags)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        return cfg_factory("experiment=vicreg_mnist", *overrides).trainer.precision

    bf16, plain = {"avx512f", "avx512_bf16"}, {"avx2", "avx512f"}
    assert precision(bf16, False) == "bf16-mixed"
    assert precision({"amx_bf16"}, False) == "bf16-mixed"
    assert precision(plain, False) == "32-true"  # bf16 there runs far slower than float32
    assert precision(bf16, True) == "32-true"  # accelerator auto picks the GPU: the default
    assert precision(plain, True, "trainer=gpu") == "bf16-mixed"  # what trainer/gpu.yaml sets
    assert precision(bf16, True, "trainer.accelerator=cpu") == "bf16-mixed"
    assert precision(bf16, False, "trainer.precision=32-true") == "32-true"  # the user wins


def test_experiment_changes_to_a_group_chosen_on_the_command_line_are_named():
    from trainlab.run.overrides import experiment_changes

    job = {"experiment": "vicreg_mnist", "data": "digits"}
    (line,) = experiment_changes(CONFIGS, job, ["data=digits", "seed=1"])
    assert "data.image_size=28" in line and "data.crop_scale=None" in line
    # keys the command line sets itself are its own, not the experiment's change
    (line,) = experiment_changes(CONFIGS, job, ["data=digits", "data.image_size=16"])
    assert "data.image_size" not in line and "data.crop_scale=None" in line
    given = ["data=digits", "data.image_size=16", "data.batch_size=8", "data.crop_scale=null",
             "data.views=[]"]  # fmt: skip
    assert experiment_changes(CONFIGS, job, given) == []
    # (the values an experiment inherits from one it extends: test_classifier.py's finetune)
    given = ["model=vicreg"]
    assert experiment_changes(CONFIGS, {"experiment": None, "model": "vicreg"}, given) == []
    given = ["data.image_size=28"]
    assert experiment_changes(CONFIGS, {"experiment": "vicreg_mnist"}, given) == []


# Config folders with no package of their own: they configure a library (Lightning's
# Trainer has trainer/ for its plugins; these have nothing of ours) or compose other groups.
# launcher/'s package is the submitit part's: with the part removed, local.yaml has none.
NO_PACKAGE = {"experiment", "hparams_search", "debug", "launcher", "paths", "extras"}
# Packages no config group instantiates: they are called by code, not chosen by config.
NO_GROUP = {"checks", "evaluation", "losses", "networks", "optim", "run", "utils"}
# A LightningModule's config holds the nodes of the networks it is built from.
PARTS = {"model": {"networks"}}
# Hydra's own config (configs/hydra) holds trainlab's callback for where a job's run lives
# (checks/placement.py); the checked sweeper's status is a Hydra plugin's, not trainlab's.
ELSEWHERE = {"hydra": {"checks"}}


def test_config_folders_mirror_the_packages():
    """configs/<group>/ instantiates classes of src/trainlab/<group>/ and no other package,
    so a newcomer who finds a config finds its code by the same name, and back."""
    packages = {
        p.name for p in (ROOT / "src" / "trainlab").iterdir() if (p / "__init__.py").exists()
    }
    groups = {p.name for p in CONFIGS.iterdir() if p.is_dir()}
    for group in groups - {"experiment"}:  # experiments set every group
        text = "\n".join(f.read_text() for f in (CONFIGS / group).rglob("*.yaml"))
        used = set(re.findall(r"_target_:\s*trainlab\.(\w+)\.", text))
        home = ELSEWHERE.get(group, {group})
        allowed = home | PARTS.get(group, set())
        assert used <= allowed, f"configs/{group}/ instantiates trainlab.{used - allowed}"
        if group not in NO_PACKAGE | ELSEWHERE.keys():
            assert group in packages, f"configs/{group}/ has no src/trainlab/{group}/"
    assert packages - groups == NO_GROUP


def test_a_models_monitor_read_from_its_source_equals_its_class():
    """Composing resolves ``${monitor:...}`` before torch is imported, so the resolver reads
    the class's source (its own body or a base's): the same strings the class holds."""
    from hydra.utils import get_class

    from trainlab.utils.source import class_string, configured_targets

    models = [t for t in configured_targets() if t.startswith("trainlab.model.")]
    judged = [t for t in models if isinstance(getattr(get_class(t), "monitor", None), str)]
    assert judged, models  # every LightningModule a config names (the parts' too, if kept)
    for target in judged:
        for attribute in ("monitor", "monitor_mode"):
            assert class_string(target, attribute) == getattr(get_class(target), attribute)
