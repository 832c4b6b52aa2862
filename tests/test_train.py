"""Training end to end: every experiment, train then eval, multirun, the default job."""

import json
import logging
import os
import shutil
from pathlib import Path

import hydra
import pytest
import torch
from conftest import (
    EXPERIMENTS,
    FAST,
    ROOT,
    assert_trace_unchanged,
    compose_cfg,
    make_image_folder,
    run_cli,
    train_in_process,
)
from omegaconf import OmegaConf

from trainlab.eval import evaluate
from trainlab.training import train
from trainlab.utils.errors import DataError

# One short epoch on the CPU with checkpointing on: the optimized metric must exist.
SHORT = [
    "trainer.max_epochs=1",
    "trainer.check_val_every_n_epoch=1",  # recipes may validate every few epochs
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "logger=csv",
    "features.enabled=false",
]


def assert_best_checkpoint(run_dir: Path) -> None:
    results = json.loads((run_dir / "metrics.json").read_text())
    assert results["optimized_metric"]["value"] is not None, results["optimized_metric"]
    assert Path(results["checkpoints"]["best"]).is_file()


# ImageNet-scale experiments at toy scale: their own config (precision, strategy, optimizer,
# heads, masks) on a generated folder in ImageNet's layout, with a 2-block ViT-Tiny (or the
# ResNet as it is) at 112 px, so the 14 px patches make the paper's 8x8 grid of min_keep 10.
IMAGENET_CLASSES = ("n01440764", "n01443537", "n01484850")
TOY_VIT = ["size=vit_tiny", "depth=2"]
TOY = {
    "ijepa": [
        *(f"model.encoder.{o}" for o in TOY_VIT),
        "model.predictor.pred_dim=32", "model.predictor.depth=1", "model.predictor.num_heads=2",
        "model.bank_size=64",
    ],
    "linear_probe_in1k": [f"model.net.encoder.{o}" for o in TOY_VIT],
    "finetune_in1k": [f"model.net.encoder.{o}" for o in TOY_VIT],
}  # fmt: skip


# Over 4 s each on a 2-core EPYC without bf16 (CNN encoders, 32-px or 28-px images of two
# views, DINO's multi-crop): make test-slow runs them, make test the other experiments of the
# same methods (ijepa_digits, mae_digits, vicreg_digits among them).
SLOW_EXPERIMENTS = {
    "dino_digits", "dino_digits_convnext", "dino_digits_resnet", "dino_mnist",
    "ijepa_cifar10", "supervised_resnet50", "vae_cifar10", "vicreg_digits_resnet",
    "vicreg_mnist_resnet", "vicreg_digits_efficientnet", "vicreg_fashion", "dino_fashion",
    "vicreg_fashion_resnet", "dino_fashion_resnet", "vicreg_mnist", "mae_fashion",
    "ijepa_fashion", "lejepa_digits", "lejepa_digits_resnet", "dino_folder", "lejepa_folder",
    "mae_folder",
}  # fmt: skip
#: The folder experiments' ViT-Small at test scale.
FOLDER_SCALE = [
    "model.encoder.size=vit_tiny", "model.encoder.depth=2", "data.num_workers=0", "data.batch_size=4",
]  # fmt: skip


@pytest.mark.parametrize(
    "experiment",
    [pytest.param(e, marks=pytest.mark.slow) if e in SLOW_EXPERIMENTS else e for e in EXPERIMENTS],
)
def test_every_experiment_runs_and_checkpoints(tmp_path, experiment):
    """Two batches of everything. Where the data is absent (or would be downloaded), small experiments run on FakeData
    of the same shape instead, ImageNet ones on a generated ImageNet-like folder with a toy
    encoder (TOY): every experiment's config is composed and run."""
    overrides = [f"experiment={experiment}", *SHORT]
    if experiment.startswith("vae"):
        overrides.append("model.test_importance_samples=4")  # k=100-5000 is minutes on a CPU
    cfg = compose_cfg(tmp_path, overrides)
    if experiment.endswith("_folder"):  # a folder of one's own: generated, read at test scale
        root = make_image_folder(tmp_path / "photos", per_class=4, size=20)
        overrides += [f"data.root={root}", *FOLDER_SCALE]
        cfg = compose_cfg(tmp_path, overrides)
    elif cfg.data.get("root", "").endswith("imagenet"):
        root = make_image_folder(tmp_path / "imagenet", IMAGENET_CLASSES, per_class=4, size=120)
        overrides += [
            *TOY.get(experiment, []),
            f"data.root={root}",
            f"data.num_classes={len(IMAGENET_CLASSES)}",
            "data.image_size=112",
            "data.global_batch_size=null",  # the recipe's 2048 and more: 4 per step here
            "data.batch_size=4",
            "data.num_workers=0",
        ]
        cfg = compose_cfg(tmp_path, overrides)
    try:
        hydra.utils.instantiate(cfg.data).check()
        absent = bool(cfg.data.get("download"))  # it would be fetched: tests reach no network
    except DataError:
        absent = True
    if absent:
        d = cfg.data
        cfg = compose_cfg(
            tmp_path,
            [
                *overrides,
                "data=fake",
                f"data.image_size={d.image_size}",
                f"data.in_chans={d.in_chans}",
                f"data.num_classes={d.num_classes}",
                f"data.mean={list(d.mean)}",
                f"data.std={list(d.std)}",
                # an experiment's subsample of a large set would leave FakeData no batch
                "++data.train_fraction=1.0",
            ],
        )
    train(cfg)
    assert_best_checkpoint(tmp_path / "run")


@pytest.mark.parametrize(
    "overrides",
    [
        *(
            [["model=vae", "model.test_importance_samples=4"]]
            if (ROOT / "configs" / "model" / "vae.yaml").exists()
            else []
        ),  # the VAE part
        ["data=mnist5k"],
        *(
            [
                ["model=classifier"],
                ["data=fake", "model=classifier"],
                ["data=mnist5k", "model=classifier"],
            ]
            if (ROOT / "configs" / "model" / "classifier.yaml").exists()
            else []
        ),  # the classifier part
    ],
    ids=lambda o: " ".join(o),
)
@pytest.mark.slow  # 8 s: make test-slow, which CI runs
def test_groups_run_and_checkpoint_outside_an_experiment(tmp_path, overrides):
    """No experiment: the groups' own defaults, each judged by its model's own metric."""
    train(compose_cfg(tmp_path, [*SHORT, *overrides]))  # after SHORT: logger=<option> wins
    assert_best_checkpoint(tmp_path / "run")


def group_options() -> list[list[str]]:
    """Every option of the groups a run composes besides experiment, model and data (those
    have their own tests above): a callbacks file that composes others (``defaults:``) or
    none alone, a single callback added to the default list unless it is in it already, the
    other groups' options alone or inside the option that composes them. Options that need more than this CPU are left out:
    trainer=gpu/ddp and the 2-process strategies (the DDP and FSDP tests run them),
    launcher=slurm and hparams_search (-m)."""

    def names(group):
        return sorted(p.stem for p in (ROOT / "configs" / group).glob("*.yaml"))

    def callbacks(name):
        return OmegaConf.load(ROOT / "configs" / "callbacks" / f"{name}.yaml")

    in_default = set(callbacks("default").defaults)
    options = []
    for c in names("callbacks"):
        if "defaults" in callbacks(c) or c == "none":
            options.append(
                [f"callbacks={c}"]
                + (["model=vae", "model.test_importance_samples=4"] if c == "vae" else [])
            )
        elif c not in in_default:
            options.append([f"callbacks=[default,{c}]"])
    # logger=many composes csv, tensorboard and wandb: one run checks the four files
    composed = set(OmegaConf.load(ROOT / "configs" / "logger" / "many.yaml").defaults)
    options += [[f"logger={o}"] for o in names("logger") if o not in composed]
    options += [[f"debug={o}"] for o in names("debug")]
    # trainer=cpu composes trainer=default; strategy=auto and launcher=local set nothing a
    # one-process run reads, so one run takes the three
    options += [["trainer=cpu", "strategy=auto", "launcher=local"]]
    return options


@pytest.mark.slow
@pytest.mark.parametrize("overrides", group_options(), ids=lambda o: " ".join(o))
def test_every_group_option_runs_and_checkpoints(tmp_path, overrides):
    """One short epoch of the default job with each option; where the option keeps
    checkpointing (all but callbacks=none and debug=fdr), a best checkpoint and its metric."""
    train(compose_cfg(tmp_path, [*SHORT, *overrides]))  # after SHORT: logger=<option> wins
    results = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert torch.isfinite(torch.tensor(results["metrics"]["train/loss"]))
    if overrides not in (["callbacks=none"], ["debug=fdr"]):
        assert_best_checkpoint(tmp_path / "run")


def test_the_core_times_the_fit_alone(monkeypatch):
    """run_stats: fit_seconds from the start of training to its end."""
    from types import SimpleNamespace

    from trainlab.callbacks import run_stats

    clock = iter([10.0, 22.0])  # on_train_start, on_train_end
    monkeypatch.setattr(run_stats.time, "perf_counter", lambda: next(clock))
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu")))
    stats = run_stats.RunStats()
    stats.on_train_start(trainer, None)
    stats.on_train_end(trainer, None)
    assert stats.summary() == {"fit_seconds": 12.0}


def test_the_run_summary_shows_results_and_metrics_json_keeps_every_metric(tmp_path, capsys):
    """The console leaves out per-step values and LearningRateMonitor's per-group rates (the
    default job has four, all equal to train/lr); metrics.json keeps them all. A path longer
    than the console stays on one line, to be copied, and so does a table's title."""
    from trainlab.run.metrics_file import report
    from trainlab.utils.console import print_jobs

    metrics = {
        "val/probe_acc": 0.95, "train/lr": 1e-6, "train/loss_step": 18.0,
        "lr-AdamW/encoder/decay": 1e-6, "lr-AdamW/encoder/no_decay": 1e-6,
    }  # fmt: skip
    best = tmp_path / "checkpoints" / f"epoch039-step000800-{'x' * 80}.ckpt"
    head = {"run dir": tmp_path, "best checkpoint": best}
    path = report("run summary", tmp_path, metrics, head=head)
    screen = capsys.readouterr().out
    assert str(best) in screen
    title = f"frozen features of last.ckpt ({'x' * 60}; images: train 1,294, 1 rank(s), 14.0 s)"
    print_jobs(title, ["features of", "linear (test)"], [["pixels", 0.961]])
    assert title in capsys.readouterr().out
    assert "val/probe_acc" in screen and "train/lr" in screen
    assert "lr-AdamW" not in screen and "loss_step" not in screen
    assert json.loads(path.read_text())["metrics"] == metrics


def test_train_then_eval_give_the_same_test_metrics(tmp_path, caplog, capsys):
    """The default job's checkpoint through eval.py (mode=test): the same test metrics as the
    run's own test (the online probe and kNN read the bank the checkpoint holds), and no
    checkpoint callback of Lightning's own, nor its tip, in a run that only tests. Each prints
    its test metrics once, in its summary, not also in Lightning's table."""
    train_cfg = compose_cfg(tmp_path / "t", [*SHORT, "trainer.max_epochs=2"])
    train(train_cfg)
    assert capsys.readouterr().out.count("test/probe_acc") == 1
    results = json.loads((tmp_path / "t" / "run" / "metrics.json").read_text())
    best = results["checkpoints"]["best"]
    assert Path(best).is_file() and Path(results["checkpoints"]["last"]).is_file()
    assert results["run"]["global_batch_size"] == train_cfg.data.batch_size
    assert results["run"]["fit_seconds"] > 0
    eval_cfg = compose_cfg(
        tmp_path / "e", [f"ckpt_path={best}", "trainer.limit_test_batches=1"], "eval"
    )
    caplog.clear()
    with caplog.at_level(logging.INFO):
        metrics = evaluate(eval_cfg)
    assert "litmodels" not in caplog.text
    assert capsys.readouterr().out.count("test/probe_acc") == 1
    for key in ("test/probe_acc", "test/knn_acc"):
        assert metrics[key] == pytest.approx(results["metrics"][key], abs=1e-6), key
    assert (tmp_path / "e" / "run" / "metrics.json").exists()


@pytest.mark.slow  # 18 s: make test-slow, which CI runs
def test_multirun_makes_one_run_dir_per_job(tmp_path):
    result = run_cli(
        "train.py",
        "-m",
        "model.warmup_epochs=1,3",
        *FAST,
        f"paths.log_dir={tmp_path}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (sweep,) = (tmp_path / "train" / "multiruns").iterdir()
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0", "1"]
    lrs = []
    for job in jobs:
        results = json.loads((job / "metrics.json").read_text())
        assert results["optimized_metric"]["name"] == "val/probe_acc"
        assert 0.0 <= results["optimized_metric"]["value"] <= 1.0
        lrs.append((job / "overrides.yaml").read_text())
    assert ["model.warmup_epochs=1" in x for x in lrs] == [True, False]
    assert ["model.warmup_epochs=3" in x for x in lrs] == [False, True]


@pytest.mark.slow  # 320 s beside the other worker, one thread (2-core Xeon): make test-slow
@pytest.mark.timeout(1800)
def test_the_default_job_in_full(tmp_path):
    """`python train.py` as it is, in a network namespace with no network at all where
    ``unshare -rn`` is permitted (CI's machines): it finishes with a clean console, and its
    frozen features beat a random encoder of the same shape under the protocol (seeds 0-2
    in the README: kNN 0.92 against 0.54)."""
    import subprocess
    import sys

    offline = (
        bool(shutil.which("unshare"))
        and not subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode
    )
    cmd = [
        *(["unshare", "-rn"] if offline else []),
        sys.executable,
        str(ROOT / "train.py"),
        f"paths.log_dir={tmp_path}",
        "run_name=full",
    ]
    env = {"PATH": "/usr/bin:/bin", "WANDB_MODE": "offline", "HOME": str(tmp_path)}
    # make's one thread a process: 2 would spin on the other worker's core
    if "OMP_NUM_THREADS" in os.environ:
        env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=1800, cwd=tmp_path, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = tmp_path / "train" / "runs" / "full"
    results = json.loads((run_dir / "metrics.json").read_text())
    metrics = results["metrics"]
    assert metrics["test/probe_acc"] > 0.3 and metrics["test/knn_acc"] > 0.2  # chance is 0.1
    # ... and it ends with the feature protocol's ratings, all of them accuracies
    rated = {k: v for k, v in metrics.items() if k.startswith(("features/", "baseline/"))}
    assert len(rated) == 6 and all(0 <= v <= 1 for v in rated.values()), rated
    assert results["chosen"]["features"]["linear"]["view"]
    assert metrics["features/linear_acc"] > metrics["baseline/random_linear_acc"]
    assert metrics["features/knn_acc"] > metrics["baseline/random_knn_acc"] + 0.15
    for name in ("config.yaml", "overrides.yaml", "meta.json", "requirements.txt"):
        assert (run_dir / name).exists(), name
    assert "run summary" in result.stdout
    console = result.stdout + result.stderr  # each of Lightning's lines once, not twice
    assert console.count("Seed set to") == 1 and console.count("GPU available:") == 1
    # No warning of any library on the default job's console, on every torch in range: a new
    # one is read and fixed, or named in run/failures.py's KNOWN_NOISE with its reason.
    assert "Warning" not in console, [line for line in console.splitlines() if "Warning" in line]


def test_the_default_jobs_trace_is_bitwise_unchanged(tmp_path):
    """`python train.py`'s per-step losses (2 short epochs) exactly as recorded in
    fixtures/default_job_trace: a refactor of the core must not change the default job's
    numbers (conftest.assert_trace_unchanged says when it skips and how to re-record)."""
    traces = ROOT / "tests" / "fixtures" / "default_job_trace"
    assert_trace_unchanged(tmp_path, traces, [])


def test_resume_continues_the_run_in_its_own_dir(tmp_path, monkeypatch, capfd):
    import torch
    from conftest import run_in_process

    import trainlab.commands

    base = ["train.py", *FAST, f"paths.log_dir={tmp_path}", "run_name=r", "model.encoder.depth=1"]
    stop = ["+callbacks.stop._target_=signal_at_step.SignalAtStep", "+callbacks.stop.step=1"]
    assert (
        run_in_process(trainlab.commands.train_command, [*base, *stop], monkeypatch) == 143
    )  # SIGTERM
    run_dir = tmp_path / "train" / "runs" / "r"
    config = (run_dir / "config.yaml").read_text()
    argv = [*base, "resume=true", "trainer.max_epochs=2"]
    assert run_in_process(trainlab.commands.train_command, argv, monkeypatch) == 0
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 6 and last["epoch"] == 1  # 3 steps, then 3 more
    assert (run_dir / "config.yaml").read_text() == config
    assert "resume=true" in (run_dir / "resumes.txt").read_text()
    log = (run_dir / "train.log").read_text()
    assert "resume: trainer.max_epochs: 1 -> 2" in log
    assert "resume: resume:" not in log and "resume: run_name:" not in log  # how it is asked


def test_a_library_warning_is_one_line_on_the_console_and_in_the_run_log(
    tmp_path, monkeypatch, capfd
):
    """Lightning warns that 3 batches are fewer than trainer.log_every_n_steps=10: one line
    in the log's format, on the console and in train.log (Python would print the path and
    the source line, to the console only)."""
    argv = [*FAST, "model.encoder.depth=1", "run_name=w"]
    assert train_in_process(monkeypatch, tmp_path, *argv) == 0
    console = "".join(capfd.readouterr())
    (line,) = [line for line in console.splitlines() if "logging interval" in line]
    said = "[py.warnings][WARNING] - PossibleUserWarning: The number of training batches (3)"
    assert said in line
    assert line in (tmp_path / "train" / "runs" / "w" / "train.log").read_text().splitlines()


def test_a_shortened_recipe_warns_that_its_last_epochs_are_not_validated(tmp_path, caplog):
    """vicreg_mnist validates every 5 epochs: cut to 3, it would end without a val/probe_acc."""
    from trainlab.checks.config import warn_unvalidated_epochs

    warn_unvalidated_epochs(compose_cfg(tmp_path, ["experiment=vicreg_mnist"]))
    assert "not validated" not in caplog.text
    warn_unvalidated_epochs(
        compose_cfg(tmp_path, ["experiment=vicreg_mnist", "trainer.max_epochs=3"])
    )
    assert "the last 3 epoch(s) are not validated" in caplog.text


def test_a_warmup_as_long_as_the_run_warns(tmp_path, caplog):
    """The default job warms up for 2 of its 40 epochs: cut to 2 epochs, it would never
    reach its peak learning rate."""
    from trainlab.checks.config import warn_warmup_past_the_run

    warn_warmup_past_the_run(compose_cfg(tmp_path, ["trainer.max_epochs=3"]))
    assert "warms up" not in caplog.text
    warn_warmup_past_the_run(compose_cfg(tmp_path, ["trainer.max_epochs=2"]))
    assert "model.warmup_epochs=2 is not below trainer.max_epochs=2" in caplog.text


def test_preflight_leaves_the_runs_model_as_it_was_built(tmp_path):
    """The model preflight puts a batch through is the run's own (built once): its weights,
    buffers and modes are as built (a classifier's train/acc: test_classifier.py)."""
    from trainlab.checks.preflight import build_model, preflight

    cfg = compose_cfg(tmp_path, [])
    datamodule = hydra.utils.instantiate(cfg.data)
    model = build_model(cfg)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    modes = [m.training for m in model.modules()]
    preflight(cfg, datamodule, model)
    assert [m.training for m in model.modules()] == modes
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
