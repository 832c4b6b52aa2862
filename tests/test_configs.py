"""Every experiment composes, and its model, datamodule and trainer instantiate on CPU."""

import json
import re
import subprocess
import sys
import typing

import hydra
import pytest
import torch
from conftest import CONFIGS, EXPERIMENTS, ROOT

from trainlab.checks.config import check_config


def test_there_are_experiments():
    assert {"digits_classifier", "ijepa_digits", "ijepa_cifar10", "ijepa"} <= set(EXPERIMENTS)


def test_default_job_is_ijepa_on_digits(cfg_factory):
    cfg = cfg_factory()
    assert cfg.model._target_.endswith("IJEPA") and cfg.data._target_.endswith("DigitsDataModule")
    assert cfg.trainer.accelerator == "auto" and cfg.optimized_metric == "val/probe_acc"


def test_ijepa_experiment_is_the_paper_recipe(cfg_factory):
    cfg = cfg_factory("experiment=ijepa")
    enc, pred, m = cfg.model.encoder, cfg.model.predictor, cfg.model
    assert (enc.size, enc.patch_size, cfg.data.image_size) == ("vit_huge", 14, 224)
    assert (pred.depth, pred.pred_dim, pred.num_heads) == (12, 384, 16)  # the encoder's heads
    assert cfg.data.global_batch_size == 2048 and cfg.trainer.precision == "bf16-mixed"
    assert cfg.trainer.max_epochs == 300 and m.warmup_epochs == 40
    assert (m.start_lr, m.optimizer.lr, m.final_lr) == (2e-4, 1e-3, 1e-6)
    assert list(m.ema) == [0.996, 1.0]
    assert list(m.weight_decay) == [0.04, 0.4] and list(cfg.data.crop_scale) == [0.3, 1.0]
    assert list(m.masks.target_scale) == [0.15, 0.2] and m.masks.num_targets == 4


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_instantiates(cfg_factory, experiment):
    cfg = cfg_factory(f"experiment={experiment}", "trainer.accelerator=cpu")
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
def test_every_option_of_a_group_composes(cfg_factory, group):

    for option in sorted(p.stem for p in (CONFIGS / group).glob("*.yaml")):
        overrides = [f"{group}={option}"]
        if group == "data" and option in ("imagefolder", "imagenet", "stream"):
            overrides.append("data.num_classes=10")
        cfg = cfg_factory(*overrides)
        check_config(cfg)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["data.image_size=18"],
            r"model.encoder.img_size=18 \(data.image_size\) is not a multiple of model.encoder.patch_size=4",
        ),
        (
            ["experiment=linear_probe", "data.image_size=30"],
            r"model.net.encoder.img_size=30 .*encoder.patch_size=4: set data.image_size to a multiple of 4 \(e.g. 28\)",
        ),
        (
            ["data.batch_size=0"],
            r"data.batch_size=0 is not valid: .* DigitsDataModule takes int >= 1",
        ),
        (["data.batch_size=-1"], r"data.batch_size=-1 is not valid: input should be greater"),
        (["data.global_batch_size=0"], r"data.global_batch_size=0 is not valid: input should"),
        (["model.schedule_scale=0.5"], r"model.schedule_scale=0.5 would end the schedules"),
    ],
)
def test_values_that_cannot_work_are_refused_naming_the_key(cfg_factory, overrides, message):
    """Before this check, a patch size that does not divide the image failed deep in the model
    ("The size of tensor a (18) must match ...") and batch_size=0 in torch's DataLoader."""
    from trainlab.utils.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        check_config(cfg_factory(*overrides))


def test_num_classes_is_counted_from_the_folder_or_its_classes_json(cfg_factory, tmp_path):
    import json

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


def test_ijepa_mnist_runs_bf16_only_on_a_cpu_with_bf16_instructions(cfg_factory, monkeypatch):
    import trainlab.trainer.cpu_precision as cpu_precision

    def precision(flags, cuda, *overrides):
        monkeypatch.setattr(cpu_precision, "cpu_flags", lambda: flags)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        return cfg_factory("experiment=ijepa_mnist", *overrides).trainer.precision

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

    (line,) = experiment_changes(
        CONFIGS, {"experiment": "ijepa_mnist", "data": "digits"}, ["data=digits", "seed=1"]
    )
    assert "data.image_size=28" in line and "data.crop_scale=None" in line
    # keys the command line sets itself are its own, not the experiment's change
    (line,) = experiment_changes(
        CONFIGS,
        {"experiment": "ijepa_mnist", "data": "digits"},
        ["data=digits", "data.image_size=16"],
    )
    assert "data.image_size" not in line and "data.crop_scale=None" in line
    given = ["data=digits", "data.image_size=16", "data.batch_size=8", "data.crop_scale=null"]
    assert experiment_changes(CONFIGS, {"experiment": "ijepa_mnist", "data": "digits"}, given) == []
    # finetune extends linear_probe: the values it inherits count too
    (line,) = experiment_changes(
        CONFIGS, {"experiment": "finetune", "model": "classifier"}, ["model=classifier"]
    )
    assert "model.layer_decay=0.75" in line and "model.net.freeze_encoder=False" in line
    given = ["model=classifier"]
    assert experiment_changes(CONFIGS, {"experiment": None, "model": "classifier"}, given) == []
    assert experiment_changes(CONFIGS, {"experiment": "ijepa_mnist"}, ["data.image_size=32"]) == []


# Config folders with no package of their own: they configure a library (Lightning's
# Trainer has trainer/ for its plugins; these have nothing of ours) or compose other groups.
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


def test_the_signature_cache_is_written_by_a_run_and_drops_an_entry_whose_source_changed(
    cfg_factory, tmp_path, monkeypatch
):
    """No generated file to keep by hand: the full check writes the entries of the classes it
    read, the light check uses them, and an edited source (its time changed) is read anew."""
    from trainlab.utils import signatures

    monkeypatch.setattr(signatures, "FILE", tmp_path / "signatures.json")
    signatures.signatures.cache_clear()
    try:
        target = "trainlab.model.vicreg.VICReg"
        assert signatures.known(target) is None  # a class never seen: checked after torch only
        check_config(cfg_factory("experiment=vicreg_digits"))  # the full check, imports
        entry = signatures.known(target)
        assert entry is not None and entry["monitor"] == "val/probe_acc"
        assert entry["arguments"] == signatures.describe(target)["arguments"]
        assert "trainlab.networks.vit.ViTEncoder" in signatures.signatures()  # its encoder too
        cached = json.loads(signatures.FILE.read_text())
        source = next(f for f in cached[target]["files"] if f.endswith("model/vicreg.py"))
        cached[target]["files"][source] -= 1  # as if vicreg.py were edited since
        signatures.FILE.write_text(json.dumps(cached))
        signatures.signatures.cache_clear()
        assert signatures.known(target) is None and signatures.annotations(target) is None
        signatures.remember([target])
        assert signatures.known(target)["files"][source] == entry["files"][source]
    finally:
        signatures.signatures.cache_clear()


def test_a_forged_cache_entry_runs_no_code_and_names_no_monitor_of_its_own(tmp_path, monkeypatch):
    """The cache is read as data: an entry whose text is code is not evaluated (the light
    check then has no annotations, and the full check reads the class), and a monitor
    written by hand gives way to the class's once it is imported; the full check's
    ``remember`` writes the true entry back."""
    from trainlab.model import monitor
    from trainlab.model.vicreg import VICReg
    from trainlab.utils import signatures

    target = "trainlab.model.vicreg.VICReg"
    planted = tmp_path / "ran"
    entry = signatures.describe(target)
    forged = {**entry, "monitor": "train/loss", "monitor_mode": "max"}
    forged["arguments"] = {
        **entry["arguments"],
        "sim": f"__import__('os').system('touch {planted}')",
    }
    monkeypatch.setattr(signatures, "FILE", tmp_path / "signatures.json")
    signatures.FILE.write_text(json.dumps({target: forged}))
    signatures.signatures.cache_clear()
    try:
        assert signatures.known(target) is not None  # current by its files and stamp ...
        assert signatures.annotations(target) is None and not planted.exists()  # ... not code
        for code in ("typing.Annotated[int, Ge(ge=__import__('os'))]", "typing.sys.modules"):
            with pytest.raises(ValueError, match="not an annotation's text"):
                signatures.evaluate(code)
        assert monitor.read("monitor", target) == VICReg.monitor == "val/probe_acc"
        assert monitor.read("monitor_mode", target) == "max" == VICReg.monitor_mode
        signatures.remember([target])
        assert signatures.known(target) == entry
    finally:
        signatures.signatures.cache_clear()


TARGET = "trainlab.model.vicreg.VICReg"
# Damage to the cache, given the true entry of VICReg: JSON text for the whole file.
DAMAGE = {
    "files-a-string": lambda e: json.dumps({TARGET: {**e, "files": "model/vicreg.py"}}),
    "arguments-not-text": lambda e: json.dumps({TARGET: {**e, "arguments": {"x": 1}}}),
    "entry-a-list": lambda e: json.dumps({TARGET: [e]}),
    "file-a-list": lambda e: json.dumps([e]),
    "nested-200000": lambda e: "[" * 200_000 + "]" * 200_000,  # deeper than Python recurses
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_cache_is_read_as_none_and_written_anew(tmp_path, monkeypatch, damage):
    """Any damage to the cache costs the light check its entries, never a command: the
    entries read as missing, and remember writes the file whole again."""
    from trainlab.utils import signatures

    monkeypatch.setattr(signatures, "FILE", tmp_path / "signatures.json")
    signatures.FILE.write_text(DAMAGE[damage](signatures.describe(TARGET)))
    signatures.signatures.cache_clear()
    try:
        assert signatures.known(TARGET) is None and signatures.annotations(TARGET) is None
        signatures.remember([TARGET])
        signatures.signatures.cache_clear()
        assert signatures.known(TARGET) == signatures.describe(TARGET)
        assert list(json.loads(signatures.FILE.read_text())) == [TARGET]
    finally:
        signatures.signatures.cache_clear()


def test_every_cached_text_reads_back_as_its_annotation():
    """The reader of cached text gives what the annotations are, for every target configs/
    names (it replaces eval: the same result on every form as_text writes)."""
    from trainlab.utils import signatures

    for target, entry in signatures.generate().items():
        hints = signatures.annotations_of(target)
        for name, text in entry["arguments"].items():
            assert signatures.as_text(signatures.evaluate(text)) == text, (target, name)
            assert signatures.as_text(hints[name]) == text, (target, name)


def test_an_edit_to_any_module_of_trainlab_drops_the_cached_entries(tmp_path, monkeypatch):
    """An annotation may read an alias another module defines (a Literal of comm hooks):
    every entry carries a stamp of all of trainlab's modules, and an edit to one changes it."""
    from trainlab.utils import signatures

    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("Hook = 'fp16'\n")
    monkeypatch.setattr(signatures, "PACKAGE", tmp_path)
    signatures.project_stamp.cache_clear()
    try:
        before = signatures.project_stamp()
        own = tmp_path / "a.py"  # the class's own module: unchanged
        entry = {
            "python": sys.prefix,
            "files": {str(own): own.stat().st_mtime_ns},
            "project": before,
        }
        assert signatures.current(entry)
        (tmp_path / "sub" / "b.py").write_text("Hook = 'fp16' or 'bf16'\n")
        signatures.project_stamp.cache_clear()
        assert signatures.project_stamp() != before and not signatures.current(entry)
    finally:
        signatures.project_stamp.cache_clear()


def test_a_unions_text_does_not_depend_on_which_order_typing_saw_first():
    """typing caches a union in the order it was first built: after another module wrote
    `Optional[Union[float, int]]`, Lightning's `Optional[Union[int, float]]` reads back as
    that. The cache's text must not depend on which modules a process imported before."""
    from trainlab.utils.signatures import as_text

    # typing's own spelling, as Lightning writes it, is the point here: not ``float | int``
    typing.Optional[typing.Union[float, int]]  # noqa: B018, UP007, UP045
    lightnings = typing.Optional[typing.Union[int, float]]  # noqa: UP007, UP045
    assert as_text(lightnings) == as_text(int | float | None)
    assert as_text(lightnings) == "typing.Union[float, int, NoneType]"


@pytest.mark.slow  # imports every target in a fresh interpreter (10 s)
def test_a_cache_entry_written_by_a_run_equals_a_fresh_interpreters():
    """make install writes the cache in a fresh interpreter, a run in one that has imported
    much more (which annotations resolve could depend on it): both write the same entries."""
    from trainlab.utils.signatures import generate

    code = (
        "import json; from trainlab.utils.signatures import generate; print(json.dumps(generate()))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == json.loads(json.dumps(generate()))
