"""Libraries' private names: only inside src/trainlab/utils/<library>_internals.py, and each
one still there on the installed versions (an upgrade that moves one fails here, by name,
not somewhere in a run: an overridden private hook that was renamed would simply never be
called)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = {
    "lightning", "torch", "hydra", "omegaconf", "optuna", "submitit", "litdata", "timm",
    "torchvision", "torchdata", "torchmetrics", "wandb",
}  # fmt: skip
INTERNALS = ROOT / "src" / "trainlab" / "utils"
HYDRA_KEYS = {"_target_", "_args_", "_partial_", "_convert_", "_recursive_"}


def private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__") and name not in HYDRA_KEYS


def own_private_names(files: list[Path]) -> set[str]:
    """The project's own private names: its functions, classes and ``self._x`` attributes
    (a library's attribute set from outside, ``model._trainer = ...``, is not among them)."""
    names = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.add(node.attr)
    return names


def private_uses(path: Path, own: frozenset[str] = frozenset()) -> list[str]:
    """Private imports from the libraries, and ``x._name`` on anything but self and cls
    that the project does not define itself (``trainer._logger_connector``,
    ``torch._dynamo``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            names = [a.name for a in node.names]
            if parts[0] in LIBRARIES and any(map(private, parts + names)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in LIBRARIES and any(map(private, parts)):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.Attribute) and private(node.attr) and node.attr not in own:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_private_names_of_libraries_are_used_only_in_their_internals_modules():
    files = [ROOT / "train.py", ROOT / "eval.py"]
    for folder in ("src", "scripts", "benchmarks", "research", "tests"):
        files += sorted((ROOT / folder).rglob("*.py"))
    allowed = {*INTERNALS.glob("*_internals.py"), Path(__file__).resolve()}  # and this check
    own = frozenset(own_private_names([f for f in files if f not in allowed]))
    outside = [use for f in files if f not in allowed for use in private_uses(f, own)]
    assert not outside, "private names outside utils/*_internals.py:\n" + "\n".join(outside)


def test_the_scan_finds_what_it_is_for(tmp_path):
    """The scan above could pass by finding nothing: it finds each kind of use."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from torch._dynamo import config\n"
        "from lightning.pytorch.strategies.launchers import _SubprocessScriptLauncher\n"
        "import torch._inductor.config\n"
        "trainer._logger_connector.should_update_logs\n"
        "self._own = cfg._target_\n"
    )
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        uses = private_uses(sample)
    finally:
        ROOT = root
    assert [u.split(": ", 1)[1] for u in uses] == [
        "from torch._dynamo",
        "from lightning.pytorch.strategies.launchers",
        "import torch._inductor.config",
        "trainer._logger_connector",
    ]


def test_lightning_private_names_are_where_they_were_checked(tmp_path):
    import lightning as L
    from lightning.pytorch.callbacks import RichProgressBar
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter
    from lightning.pytorch.strategies import DDPStrategy

    from trainlab.utils import lightning_internals as li

    # Hooks the project overrides: renamed upstream, the override would never run.
    for cls, hook in [
        (li.SubprocessScriptLauncher, "_call_children_scripts"),
        (li.SubprocessScriptLauncher, "_check_can_spawn_children"),
        (DDPStrategy, "_setup_model"),
        (DDPStrategy, "_register_ddp_hooks"),
        (RichProgressBar, "_update_metrics"),
        (ExperimentWriter, "_check_log_dir_exists"),
    ]:
        assert callable(getattr(cls, hook, None)), f"{cls.__name__}.{hook} moved"
    assert "_ddp_kwargs" in vars(DDPStrategy())
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    assert isinstance(li.should_update_logs(trainer), bool)
    assert li.cluster_environment(trainer) is not None
    li.stop_after_this_batch(trainer)
    assert trainer._signal_connector.received_sigterm
    assert callable(trainer._checkpoint_connector.dump_checkpoint)
    li.validation_pending(trainer)  # a restart from here reads "stopped mid validation"
    val_loop = trainer.fit_loop.epoch_loop.val_loop
    val_loop.restarting = True
    val_loop.update_restart_stage()
    assert val_loop.restarted_mid_evaluation
    li.restore_callback_metrics(trainer, {"train/lr": 0.5})
    assert trainer.callback_metrics["train/lr"] == 0.5
    assert "_launcher" in vars(trainer.strategy)
    module = L.LightningModule()
    assert li.attached_trainer(module) is None
    module.trainer = trainer
    assert li.detach_trainer(module) is trainer and li.attached_trainer(module) is None
    li.attach_trainer(module, trainer)
    assert module.trainer is trainer
    board = TensorBoardLogger(tmp_path)
    assert li.purge_tensorboard_from(board, 5) and board._kwargs["purge_step"] == 5
    csv = li.CSVLoggerHooks(tmp_path)
    assert csv.writer is None and csv.experiment is csv.writer
    assert li.compute_dtype(L.Trainer(precision="bf16-mixed", logger=False).precision_plugin)
    assert callable(li.launch_process_observer) and callable(li.set_num_threads_if_needed)
    assert isinstance(csv, CSVLogger)


def test_torch_private_names_are_where_they_were_checked():
    import torch

    from trainlab.utils import torch_internals as ti

    before = torch._dynamo.config.recompile_limit
    ti.ensure_recompile_limit(before)
    assert torch._dynamo.config.recompile_limit == before
    x = torch.zeros(2, 3)
    ti.maybe_mark_dynamic(x, 1)
    targets, ends = [torch.zeros(2)], [torch.ones(2)]
    ti.lerp_all_(targets, ends, 0.25)
    assert targets[0].tolist() == [0.25, 0.25]
    module = torch.nn.Linear(2, 2)
    ti.set_ddp_ignored_names(module, {"bias"})
    assert ti.ddp_ignored_names(module) == {"bias"}
    assert callable(ti.apply_activation_checkpointing)
    # ti.CPU_FLASH_ATTENTION and its backward: tests/test_ijepa.py (networks/flops.py's counts)
    config = ti.inductor_config()
    for flag in ("coalesce_tiling_analysis", "mix_order_reduction"):
        assert hasattr(config.triton, flag), f"torch._inductor.config.triton.{flag} moved"


def test_other_libraries_private_names_are_where_they_were_checked():
    from omegaconf import OmegaConf
    from timm.models.vision_transformer import VisionTransformer

    from trainlab.utils import hydra_internals, omegaconf_internals

    cfg = OmegaConf.create({"a": "${b}", "b": 1, "c": {"d": 2}})
    node = omegaconf_internals.node_at(cfg, "a")
    assert omegaconf_internals.is_interpolation(node)
    assert omegaconf_internals.raw_value(node) == "${b}"
    assert omegaconf_internals.dereference(node) == 1
    assert not omegaconf_internals.is_interpolation(omegaconf_internals.node_at(cfg, "c"))
    assert callable(hydra_internals.BasicSweeper._parse_config)
    assert callable(VisionTransformer._pos_embed)


@pytest.mark.parametrize(
    "module", sorted(p.name.removesuffix("_internals.py") for p in INTERNALS.glob("*_internals.py"))
)
def test_each_internals_module_says_the_versions_it_was_checked_on(module):
    text = (INTERNALS / f"{module}_internals.py").read_text()
    assert "Checked on" in text.split('"""')[1]
