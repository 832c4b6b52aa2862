"""The promises every self-supervised experiment keeps, checked for each file of
configs/experiment whose model is a ``SelfSupervised`` and whose data needs no download: a new
method inherits these tests by adding its experiment (docs/fork.md: "Add a self-supervised method").
The folder experiments (``*_folder``) join the first check at test scale (FOLDER_SCALE).

- 2 CPU ranks, each on half the batch, compute what one process computes on the whole batch:
  the loss (averaged over ranks, as logged), the gradients (averaged, as DDP does) and the
  state ``update_state()`` moves (a centre), equal on both ranks. One 2-process job for all.
- SIGTERM, then ``resume=true``: per-step losses bitwise equal to an uninterrupted run (slow,
  as the next one: one experiment of each pairing of a method and an encoder, ``pairings()``).
- ``train.py`` on 2 CPU ranks: no warning, no Lightning "recommended" line, no traceback on
  the console, equal parameters and buffers on both ranks (RankConsistency), and no buffer
  broadcast by DDP in a profiled step (slow).
"""

import json
import os
import signal
from functools import cache

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import (
    CONFIGS,
    DIGITS,
    EXPERIMENTS,
    MNIST5K,
    RANK_CONSISTENCY,
    experiments_on,
    free_port,
    run_cli,
    run_in_process,
)
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

import trainlab.commands
from trainlab.model.self_supervised import SelfSupervised
from trainlab.networks.token_masks import Masks
from trainlab.utils.seeding import step_generator

BATCH = 8  # 4 a rank
#: The folder experiments' sizes given (no folder is read) and their ViT-Small made small.
FOLDER_SCALE = [
    "data.image_size=16", "data.in_chans=3", "model.encoder.size=vit_tiny", "model.encoder.depth=2",
]  # fmt: skip


@cache
def kit() -> dict[str, dict]:
    """{experiment: its composed config}, for the self-supervised experiments on offline data."""
    found = experiments_on(DIGITS, MNIST5K).items()
    return {name: cfg for name, cfg in found if issubclass(get_class(cfg.model._target_), SelfSupervised)}  # fmt: skip


@cache
def folder_kit() -> dict[str, dict]:
    """{experiment: its composed config at FOLDER_SCALE}, for the folder experiments."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        found = {
            name: compose("train", overrides=[f"experiment={name}", *FOLDER_SCALE])
            for name in EXPERIMENTS
            if name.endswith("_folder")
        }
    GlobalHydra.instance().clear()
    return found


@cache
def pairings() -> list[str]:
    """The slow checks' experiments: the first by name of each pairing of a method and an
    encoder. A ``*_mnist`` experiment repeats its ``*_digits`` twin's method and encoder on
    other in-memory digits (one DataModule base, one loader), which the fast check and
    test_train still run; each train.py run costs about 25 s of CI. A fork's new method or
    encoder is a new pairing, so it gets these checks too."""
    first: dict[tuple, str] = {}
    for name, cfg in sorted(kit().items()):
        encoder = (
            OmegaConf.select(cfg, f"model.encoder.{key}") for key in ("_target_", "model_name")
        )
        first.setdefault((cfg.model._target_, *encoder), name)
    return sorted(first.values())


def methods() -> set[str]:
    """The project's methods: the direct subclasses of SelfSupervised in trainlab.model (a
    fork's own and the parts there included)."""
    import importlib
    import pkgutil

    import trainlab.model
    from trainlab.model.self_supervised import SelfSupervised

    for module in pkgutil.iter_modules(trainlab.model.__path__):
        importlib.import_module(f"trainlab.model.{module.name}")
    return {
        c.__name__ for c in SelfSupervised.__subclasses__() if c.__module__.startswith("trainlab.")
    }


def test_the_kit_covers_every_family():
    families = {  # a variant (RegularisedIJEPA) counts for the family it subclasses
        c.__name__ for cfg in kit().values() for c in get_class(cfg.model._target_).__mro__
    }
    assert methods() >= {"VICReg"}  # the default job's, at least
    assert families >= methods(), methods() - families


def batch_of(cfg) -> torch.Tensor | list[torch.Tensor]:
    """A random batch of BATCH images, or of views at their recipes' sizes."""
    g = torch.Generator().manual_seed(3)
    shape = lambda size: (BATCH, cfg.data.in_chans, size, size)  # noqa: E731
    if cfg.data.get("views"):
        return [torch.randn(shape(v.get("size") or cfg.data.image_size), generator=g) for v in cfg.data.views]  # fmt: skip
    return torch.randn(shape(cfg.data.image_size), generator=g)


def half(images, rank: int, world: int = 2):
    cut = lambda x: x[rank * len(x) // world : (rank + 1) * len(x) // world]  # noqa: E731
    return [cut(v) for v in images] if isinstance(images, list) else cut(images)


def tiled(masks, world: int = 2):
    """The masks ``world`` ranks draw for their halves, as one batch: every rank draws from the
    step's generator for its own batch size, so each half gets the same masks."""

    def draw(batch_size: int, generator: torch.Generator) -> Masks:
        m = masks(batch_size // world, generator)
        return Masks(m.context.repeat(world, 1), m.targets.repeat(world, 1, 1))

    return draw


def one_step(model_cfg: dict, images, world: int = 1) -> dict:
    """Loss, gradients and moved state of one training step of a fresh model (seed 0)."""
    torch.manual_seed(0)
    model = instantiate(model_cfg)
    model.train()
    if world > 1 and callable(getattr(model, "masks", None)):
        model.masks = tiled(model.masks, world)
    loss, _ = model.loss(images, step_generator(0, 0, 0))
    loss.backward()
    model.update_state()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    # The monitors' bank is filled by training_step (gathered), not by the loss.
    state = {n: b.clone() for n, b in model.named_buffers() if not n.startswith("online.")}
    return {"loss": loss.detach(), "grads": grads, "state": state}


def _kit_rank(rank: int, port: int, jobs: dict, out: dict) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    for name, (model_cfg, images) in jobs.items():
        step = one_step(model_cfg, half(images, rank))
        for key in ("loss", "grads"):  # what DDP and the logged loss average
            dist.all_reduce(step[key])
            step[key] /= 2
        out[(name, rank)] = step
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_rank_steps(request) -> dict:
    """One step of each selected kit experiment on 2 gloo ranks, each on half the batch,
    with one start-up for all (about 20 s): {(name, rank): step}, and the jobs."""
    selected = {
        item.callspec.params["experiment"]
        for item in request.session.items
        if item.originalname == "test_two_ranks_equal_one_process_on_the_global_batch"
    }
    jobs = {}
    for name, cfg in {**kit(), **folder_kit()}.items():
        if name in selected:
            model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
            jobs[name] = (model_cfg, batch_of(cfg))
    with mp.Manager() as manager:
        out = manager.dict()
        os.environ.pop("MASTER_ADDR", None)
        mp.spawn(_kit_rank, args=(free_port(), jobs, out), nprocs=2, join=True)
        return {"ranks": dict(out), "jobs": jobs}


@pytest.mark.parametrize("experiment", [*kit(), *folder_kit()])
def test_two_ranks_equal_one_process_on_the_global_batch(experiment, two_rank_steps):
    """Batch statistics (VICReg's variance and covariance, the heads' BatchNorm, I-JEPA's
    var_cov) are the global batch's, the state a step moves is the global batch's and equal
    on both ranks. ``-k "[<experiment>]"`` selects one experiment."""
    ranks = two_rank_steps["ranks"]
    model_cfg, images = two_rank_steps["jobs"][experiment]
    one = one_step(model_cfg, images, world=2)
    for rank in (0, 1):
        got = ranks[(experiment, rank)]
        assert got["loss"].item() == pytest.approx(one["loss"].item(), rel=1e-5)
        gap = (got["grads"] - one["grads"]).abs().max().item()
        assert gap <= 1e-4 * one["grads"].abs().max().item(), gap
        assert got["state"].keys() == one["state"].keys()
        for key, value in one["state"].items():
            assert torch.allclose(got["state"][key], value, atol=1e-6), key
            assert torch.equal(got["state"][key], ranks[(experiment, 0)]["state"][key]), key


SHORT = [
    "trainer.max_epochs=2", "trainer.limit_train_batches=3", "trainer.limit_val_batches=1",
    "data.batch_size=16", "test=false", "trainer.log_every_n_steps=1",
    "extras.print_config=false", "features.enabled=false",
]  # fmt: skip


def losses_by_step(run_dir) -> dict[str, str]:
    import csv

    with (run_dir / "csv" / "metrics.csv").open() as f:
        return {r["step"]: r["train/loss_step"] for r in csv.DictReader(f) if r.get("train/loss_step")}  # fmt: skip


@pytest.mark.slow  # three train.py runs an experiment
@pytest.mark.parametrize("experiment", pairings())
def test_sigterm_then_resume_gives_the_uninterrupted_losses_bitwise(
    experiment, tmp_path, monkeypatch
):
    """Stopped at step 3 and resumed: every logged step's loss is the uninterrupted run's, to
    the bit (a method whose loss moved state, or whose state is not checkpointed, fails)."""
    job = [f"experiment={experiment}", *SHORT, f"paths.log_dir={tmp_path}"]
    stop = ["+callbacks.stop._target_=signal_at_step.SignalAtStep", "+callbacks.stop.step=3",
            "+callbacks.stop.name=SIGTERM"]  # fmt: skip

    def run(*a):
        return run_in_process(trainlab.commands.train_command, ["train.py", *job, *a], monkeypatch)

    assert run("run_name=straight") == 0
    assert run("run_name=cut", "resume=true", *stop) == 128 + signal.SIGTERM
    assert run("run_name=cut", "resume=true") == 0
    runs = tmp_path / "train" / "runs"
    assert len(losses_by_step(runs / "straight")) == 6
    assert losses_by_step(runs / "cut") == losses_by_step(runs / "straight")


@pytest.mark.slow  # a 2-process train.py run an experiment
@pytest.mark.parametrize("experiment", pairings())
def test_two_ranks_through_train_py_keep_a_clean_console_and_equal_state(experiment, tmp_path):
    result = run_cli(
        "train.py", f"experiment={experiment}", "trainer.accelerator=cpu", "trainer.devices=2",
        *SHORT, "trainer.max_epochs=1", "trainer.limit_train_batches=5", RANK_CONSISTENCY,
        f"paths.log_dir={tmp_path}", "run_name=two", cwd=tmp_path, timeout=400,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    console = result.stdout + result.stderr
    for word in ("Warning", "warn", "recommended", "Traceback"):
        assert word not in console, console[-3000:]
    # Lightning's lines once, from rank 0, in the log's format: none of rank 1's own
    assert console.count("Seed set to") == 1 and "GLOBAL_RANK: 1" not in console, console[:3000]
    run_dir = tmp_path / "train" / "runs" / "two"
    report = json.loads((run_dir / "rank_consistency.json").read_text())
    assert report["world_size"] == 2 and report["consistent"], report
    # Step 3, profiled (CommCounter): DDP broadcast no buffer (a centre, a queue, the
    # monitors' bank, global BatchNorm statistics), all equal on every rank by construction.
    run = json.loads((run_dir / "metrics.json").read_text())["run"]
    assert run["comm_measured_at_step"] == 3, run
    assert "broadcast" not in run["other_comm_collectives_per_step"], run
