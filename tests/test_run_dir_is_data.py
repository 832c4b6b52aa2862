"""A run dir is data: opening a shared one never runs code named in its config.yaml."""

import shutil

import pytest
from conftest import EXPERIMENTS, run_cli, run_in_process
from omegaconf import OmegaConf

import trainlab.commands
import trainlab.eval

JOB = [
    "trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
    "model.encoder.depth=1", "test=false", "features.enabled=false",
    "extras.print_config=false", "run_name=shared",
]  # fmt: skip


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    logs = tmp_path_factory.mktemp("logs")
    mp = pytest.MonkeyPatch()
    try:
        assert (
            run_in_process(
                trainlab.commands.train_command, ["train.py", *JOB, f"paths.log_dir={logs}"], mp
            )
            == 0
        )
    finally:
        mp.undo()
    return logs / "train" / "runs" / "shared"


def planted(finished_run, tmp_path, key: str, node: dict, merge: bool = False):
    """A copy of the finished run whose config.yaml sets ``key`` to ``node`` (``merge``:
    merges it into the node there)."""
    run = tmp_path / "shared"
    shutil.copytree(finished_run, run)
    cfg = OmegaConf.load(run / "config.yaml")
    OmegaConf.update(cfg, key, node, force_add=True, merge=merge)
    OmegaConf.save(cfg, run / "config.yaml")
    return run


PAYLOADS = {  # what each target would do if it were called: touch or truncate ``victim``
    "builtins.open": lambda victim: {"_target_": "builtins.open", "file": str(victim), "mode": "w"},
    "os.system": lambda victim: {"_target_": "os.system", "command": f": > {victim}"},
    "subprocess.run": lambda victim: {"_target_": "subprocess.run", "args": ["truncate", "-s0", str(victim)]},
}  # fmt: skip


@pytest.mark.parametrize(
    "target, mode",
    [
        ("builtins.open", "test"),
        # the same refusal by other targets and the other mode: make test-slow (6 s each)
        pytest.param("os.system", "features", marks=pytest.mark.slow),
        pytest.param("subprocess.run", "test", marks=pytest.mark.slow),
    ],
)
def test_eval_refuses_a_planted_target_and_nothing_runs(finished_run, tmp_path, target, mode):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = planted(finished_run, tmp_path, "model.encoder", PAYLOADS[target](victim))
    done = run_cli("eval.py", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", f"mode={mode}",
                   f"paths.log_dir={tmp_path / 'eval_logs'}")  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if "model.encoder._target_" in line]
    assert len(lines) == 1 and target in lines[0]
    assert victim.read_text() == "precious"
    assert not list((tmp_path / "eval_logs").glob("*/runs/*"))  # refused before any run dir


def test_a_target_in_a_list_or_by_interpolation_is_refused_too(tmp_path):
    from trainlab.checks.allowed_targets import check_targets
    from trainlab.utils.errors import ConfigError

    listed = OmegaConf.create({"callbacks": [{"_target_": "lightning.pytorch.callbacks.ModelCheckpoint"}, {"_target_": "os.system"}]})  # fmt: skip
    with pytest.raises(ConfigError, match=r"callbacks\.1\._target_='os\.system'"):
        check_targets(listed, "config.yaml")
    hidden = OmegaConf.create({"evil": "posix.system", "model": {"_target_": "${evil}"}})
    with pytest.raises(ConfigError, match="posix.system"):
        check_targets(hidden, "config.yaml")
    ok = OmegaConf.create({"model": {"_target_": "trainlab.model.vicreg.VICReg", "optimizer": {"_target_": "torch.optim.AdamW"}}})  # fmt: skip
    check_targets(ok, "config.yaml")


def test_the_allow_list_is_derived_from_configs_and_refuses_other_code():
    from trainlab.checks.allowed_targets import is_allowed
    from trainlab.utils.source import configured_targets

    targets = configured_targets()
    assert "torch.optim.AdamW" in targets and "lightning.pytorch.Trainer" in targets
    assert not any(
        is_allowed(t) for t in ("builtins.open", "os.system", "subprocess.run", "builtins.eval")
    )
    # this package's classes, not its functions: this one writes wherever it is told
    assert is_allowed("trainlab.networks.vit.ViTEncoder")
    assert not is_allowed("trainlab.networks.weights.export_encoder")
    # the class, not the path to it: a module's imports are not its classes
    assert not is_allowed("trainlab.run.run_dir.logging.FileHandler")
    assert not is_allowed("trainlab.run.run_dir.subprocess.Popen")
    assert not is_allowed("trainlab.networks.vit.ViTEncoder.__init__")


def planted_payloads(victim):
    """What a shared run dir's config.yaml could hold to run code when it is opened:
    (key, node) pairs, each of which would touch ``victim`` if it were built."""
    return {
        "FileHandler via trainlab": ("data.views", {"_target_": "trainlab.run.run_dir.logging.FileHandler", "filename": str(victim), "mode": "w"}),
        "Popen via trainlab": ("data.views", {"_target_": "trainlab.run.run_dir.subprocess.Popen", "args": ["truncate", "-s0", str(victim)]}),
        "os.system": ("model.encoder", PAYLOADS["os.system"](victim)),
        "builtins.open": ("model.encoder", PAYLOADS["builtins.open"](victim)),
        "oc.create": ("data.extra", "${oc.create:{_target_: builtins.open, _args_: ['" + str(victim) + "', w]}}"),
        "oc.decode": ("data.extra", "${oc.decode:'{_target_: os.system, command: \": > " + str(victim) + "\"}'}"),
        "a trainlab function": ("model.encoder", {"_target_": "trainlab.networks.weights.export_encoder", "ckpt": "x", "out": str(victim)}),
        "monitor:this": ("model.encoder", {"_target_": "${monitor:this}"}),
    }  # fmt: skip


def test_every_planted_payload_is_refused_as_text_and_imports_nothing(tmp_path):
    """The judge alone, on each payload: refused, the victim untouched, and `this` (whose
    import prints the Zen of Python) never imported."""
    import sys

    from trainlab.checks.allowed_targets import check_targets
    from trainlab.utils.errors import ConfigError

    victim = tmp_path / "victim.txt"
    for name, (key, node) in planted_payloads(victim).items():
        cfg = OmegaConf.create({"data": {"_target_": "trainlab.data.digits.DigitsDataModule"}})
        OmegaConf.update(cfg, key, node, force_add=True, merge=False)
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            check_targets(cfg, "config.yaml")
        assert not victim.exists(), name
    assert "this" not in sys.modules


def test_a_damaged_interpolation_in_a_run_config_is_one_line():
    from trainlab.checks.allowed_targets import check_targets
    from trainlab.utils.errors import ConfigError

    damaged = OmegaConf.create({"data": {"root": "${paths.nowhere}/digits"}})
    with pytest.raises(ConfigError, match=r"data\.root=.*does not resolve.*paths\.nowhere"):
        check_targets(damaged, "config.yaml")


@pytest.mark.parametrize(
    "payload",
    [
        "oc.create",
        # the other routes to code, each refused by the same judge: make test-slow
        pytest.param("FileHandler via trainlab", marks=pytest.mark.slow),
        pytest.param("monitor:this", marks=pytest.mark.slow),
    ],
)
def test_eval_and_init_from_refuse_a_planted_config_in_one_line(finished_run, tmp_path, payload):
    """eval.py (in this process) and train.py's model.init_from: one line naming the key,
    exit 2, the victim absent, no eval or train run dir."""
    import sys

    victim = tmp_path / "victim.txt"
    key, node = planted_payloads(victim)[payload]
    run = planted(finished_run, tmp_path, key, node)
    ckpt = run / "checkpoints" / "last.ckpt"
    mp = pytest.MonkeyPatch()
    try:
        argv = ["eval.py", f"ckpt_path={ckpt}", f"paths.log_dir={tmp_path / 'logs'}"]
        assert run_in_process(trainlab.eval.main, argv, mp) == 2
        if "linear_probe" in EXPERIMENTS:  # the classifier part's model.init_from
            argv = ["train.py", "experiment=linear_probe", f"model.init_from={ckpt}",
                    f"paths.log_dir={tmp_path / 'logs'}", "trainer.max_epochs=1"]  # fmt: skip
            assert run_in_process(trainlab.commands.train_command, argv, mp) == 2
    finally:
        mp.undo()
    assert not victim.exists() and "this" not in sys.modules
    assert not list((tmp_path / "logs").glob("*/runs/*"))


@pytest.mark.slow  # 6 s: make test-slow, which CI runs
def test_init_from_a_run_with_a_planted_target_is_refused_before_a_run_dir(finished_run, tmp_path):
    if "linear_probe" not in EXPERIMENTS:
        pytest.skip("model.init_from is the classifier part's, removed")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = planted(finished_run, tmp_path, "model.encoder", PAYLOADS["os.system"](victim))
    done = run_cli(
        "train.py", "experiment=linear_probe", f"model.init_from={run / 'checkpoints' / 'last.ckpt'}",
        f"paths.log_dir={tmp_path / 'logs'}", "trainer.max_epochs=1",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "os.system" in done.stderr and victim.read_text() == "precious"
    assert not list((tmp_path / "logs").glob("*/runs/*"))


def test_a_full_disk_at_the_last_write_leaves_a_resumable_run(finished_run, tmp_path, monkeypatch):
    import errno
    import os

    from trainlab.run import metrics_file as results
    from trainlab.run.run_dir import guard
    from trainlab.utils.errors import StorageError

    run = tmp_path / "logs" / "train" / "runs" / "full"
    shutil.copytree(finished_run, run)
    (run / "metrics.json").unlink()

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(run / ".metrics.json.partial"))

    monkeypatch.setattr(results.os, "replace", full)
    with pytest.raises(StorageError, match=r"metrics\.json: No space left.*resume=true"):
        results.write_metrics_json(run, metrics={"val/loss": 1.0})
    assert sorted(p.name for p in run.iterdir() if "metrics" in p.name) == []
    guard(run, resume=True)  # not finished: resume=true may continue it


def snapshot(run_dir):
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "writer",
    [
        "callbacks.last_checkpoint.dirpath={run}/checkpoints",
        pytest.param("logger.csv.save_dir={run}", marks=pytest.mark.slow),  # the same guard
    ],
)
@pytest.mark.slow  # 8 s: make test-slow, which CI runs
def test_a_writer_pointed_into_a_finished_run_is_refused(finished_run, tmp_path, writer):
    before = snapshot(finished_run)
    done = run_cli("train.py", *JOB[:-1], "run_name=other", f"paths.log_dir={tmp_path}",
                   writer.format(run=finished_run))  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"inside the run dir {finished_run}" in done.stderr
    assert snapshot(finished_run) == before
    assert not (tmp_path / "train" / "runs" / "other").exists()


@pytest.mark.slow  # a refused start in a subprocess: make test-slow
def test_a_data_root_linked_into_a_finished_run_is_refused_when_it_would_download(
    finished_run, tmp_path
):
    """data=fashion_mnist downloads into data.root when the set is missing: a data.root
    that resolves (through a link) into a finished run is one line, before any fetch."""
    link = tmp_path / "link"
    link.symlink_to(finished_run)
    before = snapshot(finished_run)
    done = run_cli("train.py", *JOB[:-1], "run_name=other", f"paths.log_dir={tmp_path}",
                   "data=fashion_mnist", f"data.root={link}")  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [errors[0]] and f"data.root={link} is inside the run dir" in errors[0]
    assert snapshot(finished_run) == before
    assert not (tmp_path / "train" / "runs" / "other").exists()


@pytest.mark.slow  # subprocesses: make test-slow
def test_export_never_writes_into_a_run_dir_or_over_a_file_without_force(finished_run, tmp_path):
    ckpt = finished_run / "checkpoints" / "last.ckpt"
    before = snapshot(finished_run)
    done = run_cli("scripts/export_encoder.py", str(ckpt), str(ckpt))
    assert done.returncode == 2 and "inside the run dir" in done.stderr
    assert snapshot(finished_run) == before
    out = tmp_path / "encoder.safetensors"
    out.write_bytes(b"mine")
    done = run_cli("scripts/export_encoder.py", str(ckpt), str(out))
    assert done.returncode == 2 and "--force" in done.stderr and out.read_bytes() == b"mine"
    done = run_cli("scripts/export_encoder.py", str(ckpt), str(out), "--force")
    assert done.returncode == 0 and out.read_bytes() != b"mine"
    fresh = tmp_path / "new" / "folder" / "encoder.safetensors"  # made, not a traceback
    done = run_cli("scripts/export_encoder.py", str(ckpt), str(fresh), "--part", "predictorr")
    assert done.returncode == 2 and "give --part one of those" in done.stderr
    assert not (tmp_path / "new").exists()  # a refusal makes no folder
    done = run_cli("scripts/export_encoder.py", str(ckpt), str(fresh))
    assert done.returncode == 0 and fresh.is_file(), done.stderr[-2000:]
    blocked = tmp_path / "a_file"
    blocked.write_text("not a folder")  # a place that cannot be written: one line
    done = run_cli("scripts/export_encoder.py", str(ckpt), str(blocked / "enc.safetensors"))
    assert done.returncode == 2 and "cannot write" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_a_multirun_into_a_finished_sweep_leaves_its_multirun_yaml_unchanged(tmp_path):
    sweep_dir = tmp_path / "sweep"
    (sweep_dir / "0").mkdir(parents=True)
    (sweep_dir / "0" / "metrics.json").write_text('{"metrics": {}}\n')
    (sweep_dir / "multirun.yaml").write_text("the finished sweep's own\n")
    before = snapshot(sweep_dir)
    done = run_cli("train.py", "-m", "seed=1,2", f"hydra.sweep.dir={sweep_dir}",
                   f"paths.log_dir={tmp_path}", *JOB[:-1])  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: sweep dir {sweep_dir}")
    assert snapshot(sweep_dir) == before


@pytest.mark.slow  # subprocesses: make test-slow
def test_eval_refuses_a_logger_pointed_into_a_finished_run(finished_run, tmp_path):
    before = snapshot(finished_run)
    done = run_cli("eval.py", f"ckpt_path={finished_run / 'checkpoints' / 'last.ckpt'}",
                   f"paths.log_dir={tmp_path}", f"logger.csv.save_dir={finished_run}")  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"inside the run dir {finished_run}" in done.stderr
    assert snapshot(finished_run) == before


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)
)  # 9 ** 10 leaves from 1 KB


@pytest.mark.parametrize(
    "text, needle",
    [
        (BILLION_LAUGHS, "more than 16 YAML aliases"),
        ("items:\n" + "- 1\n" * 400_000, "MiB, over the 1 MiB"),  # 1.6 MB of list items
        (b"model: caf\xe9\n", "is not UTF-8"),
        ("model: [unclosed\n", "is not valid YAML at line 2"),
    ],
    ids=["alias-bomb", "too-large", "not-utf8", "not-yaml"],
)
def test_a_run_dirs_yaml_is_refused_before_it_is_parsed(tmp_path, text, needle):
    import time

    from trainlab.run.run_yaml import read_run_yaml
    from trainlab.utils.errors import ConfigError

    path = tmp_path / "config.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=needle):
        read_run_yaml(path)
    assert time.perf_counter() - start < 1.0  # OmegaConf would build 3.4 billion nodes


def test_a_planted_alias_bomb_stops_eval_in_one_line(finished_run, tmp_path):
    """eval.py (config.yaml) refuses it, exit 2, and does not hang (the runs table's
    overrides.yaml: test_runs.py)."""
    run = tmp_path / "logs" / "train" / "runs" / "shared"
    shutil.copytree(finished_run, run)
    (run / "config.yaml").write_text(BILLION_LAUGHS)
    (run / "overrides.yaml").write_text(BILLION_LAUGHS)
    done = run_cli("eval.py", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
                   f"paths.log_dir={tmp_path / 'eval_logs'}", timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "YAML aliases" in errors[0], done.stderr[-2000:]
    assert not (tmp_path / "eval_logs").exists()


@pytest.mark.slow  # an eval.py subprocess, 6 s: make test-slow, which CI runs
def test_a_part_the_checkpoint_does_not_hold_is_refused_naming_those_it_does(
    finished_run, tmp_path
):
    """eval.py mode=features features.init_part=<missing>: exit 2 in one line that lists the
    checkpoint's networks, and no run dir; rating another network silently would record it
    under the wrong name."""
    ckpt = finished_run / "checkpoints" / "last.ckpt"
    done = run_cli("eval.py", f"ckpt_path={ckpt}", "mode=features",
                   "features.init_part=target_encoderr", f"paths.log_dir={tmp_path}")  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1, done.stderr[-2000:]
    assert "features.init_part=target_encoderr" in errors[0]
    assert "it holds encoder, evaluated" in errors[0]  # the default job's networks
    assert not list(tmp_path.glob("*/runs/*"))


def listener():
    """A TCP socket on a loopback port that records whether anything connected."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.1)
    return server, server.getsockname()[1]


def connected(server) -> bool:

    try:
        server.accept()[0].close()
        return True
    except TimeoutError:
        return False


TIMM_ENCODER = "trainlab.networks.timm_encoder.timm_encoder"
COPIED = {  # case: (key, node given {port} and {elsewhere}, words of the one line)
    "an endpoint for the user's AWS key": (
        "data", {"_target_": "trainlab.data.imagefolder.ImageFolderDataModule", "root": "s3://bucket/x",
                 "endpoint_url": "http://127.0.0.1:{port}"}, "data.endpoint_url=http://127.0.0.1"),
    "a remote root": (
        "data", {"_target_": "trainlab.data.imagefolder.ImageFolderDataModule", "root": "s3://theirs/x"},
        "data.root=s3://theirs/x is remote"),
    "a positional download": (
        "data", {"_target_": "trainlab.data.torchvision_sets.TorchvisionDataModule",
                 "_args_": ["mnist", True], "root": "{elsewhere}"}, "data._args_ gives arguments by position"),
    "weights through an encoder's kwargs": (
        "model.encoder.zz", {"_target_": TIMM_ENCODER, "model_name": "resnet18", "pretrained": True},
        "model.encoder.zz.pretrained=True would download weights"),
    # a class the configs name (so it passes that check), built where no config puts it
    "a foreign class inside the encoder": (
        "model.encoder.zz", {"_target_": "torch.optim.AdamW"},
        "model.encoder.zz._target_=torch.optim.AdamW is built into the encoder"),
}  # fmt: skip


@pytest.mark.parametrize(
    "case, mode",
    [
        ("an endpoint for the user's AWS key", "test"),
        ("weights through an encoder's kwargs", "features"),
        # the same refusals for the other cases (3 s each): make test-slow
        *(pytest.param(c, "test", marks=pytest.mark.slow) for c in list(COPIED)[1:3]),
        pytest.param("a foreign class inside the encoder", "test", marks=pytest.mark.slow),
    ],
)
def test_a_copied_run_reaches_no_network_and_writes_nothing_outside(
    finished_run, tmp_path, case, mode
):
    """eval.py on a copied run whose config.yaml was planted: one line, exit 2, no connection
    to the named endpoint, no folder outside, no run dir."""
    server, port = listener()
    elsewhere = tmp_path / "elsewhere"
    key, node, words = COPIED[case]
    filled = OmegaConf.create(
        OmegaConf.to_yaml(OmegaConf.create(node)).replace("{port}", str(port))
        .replace("{elsewhere}", str(elsewhere))
    )  # fmt: skip
    run = planted(finished_run, tmp_path, key, filled, merge=key == "data")  # its image size kept
    env = {"AWS_ACCESS_KEY_ID": "AKIAUSERSOWNKEY", "AWS_SECRET_ACCESS_KEY": "secret"}
    done = run_cli("eval.py", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", f"mode={mode}",
                   f"paths.log_dir={tmp_path / 'eval_logs'}", env=env)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and words.format(port=port) in errors[0], done.stderr[-2000:]
    assert not connected(server)
    assert not elsewhere.exists() and not (tmp_path / "eval_logs").exists()


def test_init_from_a_copied_run_takes_no_foreign_class_into_its_encoder(finished_run, tmp_path):
    from trainlab.checks.checkpoint_config import adopt_checkpoint_shape
    from trainlab.utils.errors import ConfigError

    run = planted(finished_run, tmp_path, "model.encoder.zz",
                  {"_target_": TIMM_ENCODER, "model_name": "resnet18", "pretrained": True})  # fmt: skip
    cfg = OmegaConf.create({
        "model": {"init_from": str(run / "checkpoints" / "last.ckpt"),
                  "net": {"encoder": {"_target_": "trainlab.networks.vit.ViTEncoder"}}},
        "data": {},
    })  # fmt: skip
    with pytest.raises(ConfigError, match="model.encoder.zz.pretrained=True would download"):
        adopt_checkpoint_shape(cfg, [])
    assert "zz" not in cfg.model.net.encoder
