"""Each bad input exits non-zero with one clear line, and overwrites nothing."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import (
    EXPERIMENTS,
    FAST,
    ROOT,
    assert_one_clear_line,
    make_image_folder,
    run_cli,
    run_in_process,
    run_train,
    small_disk,
    write_idx,
)
from PIL import Image

import trainlab.commands
import trainlab.data
import trainlab.eval


@pytest.mark.parametrize(
    "override, needles",
    [
        ("data=mnst5k", ["data=mnst5k", "did you mean mnist5k", "options: cifar10"]),
        ("experiment=vicreg_mnst", ["experiment=vicreg_mnst", "did you mean vicreg_mnist"]),
        ("trainer.max_epoch=3", ["trainer.max_epoch", "did you mean max_epochs", "--cfg job"]),
        ("model.encoder.pach_size=7", ["model.encoder.pach_size", "did you mean patch_size"]),
        # a key given without its group: the group's key of that name
        ("init_part=encoder", ["init_part is not a key", "did you mean features.init_part"]),
        ("trainer.max_epochs=[", ["trainer.max_epochs=[", "quote"]),
        ("seed=1,2", ["seed=1,2", "--multirun"]),
    ],
)
def test_hydra_errors_are_one_line_with_the_nearest_names(
    tmp_path, monkeypatch, capfd, override, needles
):
    """Hydra's own report is 7-22 lines and exit 1; ours names the fix in one line, exit 2,
    and the run dir Hydra would have made for the job is not there."""
    code, err = run_train(tmp_path, monkeypatch, capfd, "run_name=typo", override)
    assert code == 2, err[-2000:]
    assert_one_clear_line(err, *needles)
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "logs" / "train" / "runs" / "typo").exists()


def test_hydra_full_error_still_gives_hydras_own_report(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(Exception, match="Could not override 'trainer.max_epoch'"):
        run_train(tmp_path, monkeypatch, capfd, "trainer.max_epoch=3")


def test_wrong_type(tmp_path, monkeypatch, capfd):
    code, err = run_train(tmp_path, monkeypatch, capfd, "trainer.max_epochs=ten")
    assert code == 2
    assert_one_clear_line(err, "trainer.max_epochs", "ten", "Trainer takes int or null")


def test_wrong_type_in_a_datamodule(tmp_path, monkeypatch, capfd):
    code, err = run_train(tmp_path, monkeypatch, capfd, "data.batch_size=big")
    assert code == 2
    assert_one_clear_line(err, "data.batch_size", "int")


def test_missing_dataset_dir(tmp_path, monkeypatch, capfd):
    code, err = run_train(
        tmp_path,
        monkeypatch,
        capfd,
        "data=imagefolder",
        f"data.root={tmp_path / 'nowhere'}",
        "data.num_classes=2",
    )
    assert code == 2
    assert_one_clear_line(err, str(tmp_path / "nowhere" / "train"))


def test_missing_torchvision_files(tmp_path, monkeypatch, capfd):
    code, err = run_train(tmp_path, monkeypatch, capfd, "data=mnist", "data.num_workers=0")
    assert code == 2
    assert_one_clear_line(err, str(tmp_path / "data" / "MNIST"), "data.download=true")


def test_labels_outside_num_classes_are_refused_before_the_run_dir(tmp_path, monkeypatch, capfd):
    """A damaged Fashion-MNIST label file (labels 200 and 255 among 0-9): one line naming the
    labels and data.num_classes, exit 2, no run dir (it ended in an IndexError in training,
    after the run dir and an on_exception.ckpt)."""
    raw = tmp_path / "data" / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 40), ("t10k", 10)):
        labels = rng.integers(0, 10, n)
        if prefix == "train":
            labels[[3, 30]] = (200, 255)
        write_idx(raw / f"{prefix}-images-idx3-ubyte", rng.integers(0, 255, (n, 28, 28)))
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
    code, err = run_train(
        tmp_path, monkeypatch, capfd, "data=fashion_mnist", "data.download=false",
        "data.num_workers=0", "run_name=damaged",
    )  # fmt: skip
    assert code == 2
    assert_one_clear_line(err, "labels 200, 255 outside 0 to 9", "data.num_classes=10")
    assert not (tmp_path / "logs" / "train" / "runs" / "damaged").exists()


def test_empty_dataset(tmp_path, monkeypatch, capfd):
    for split in ("train", "val"):
        for name in ("a", "b"):
            (tmp_path / "empty" / split / name).mkdir(parents=True)
    code, err = run_train(
        tmp_path,
        monkeypatch,
        capfd,
        "data=imagefolder",
        f"data.root={tmp_path / 'empty'}",
        "data.num_classes=2",
    )
    assert code == 2
    assert_one_clear_line(err, "no images under")


def run_on_folder(tmp_path, monkeypatch, capfd, root, *args):
    folder = ("data=imagefolder", f"data.root={root}", "data.image_size=16", "data.batch_size=4")
    return run_train(tmp_path, monkeypatch, capfd, *folder, "data.num_workers=0", *args)


def _only_train(root):
    import shutil

    shutil.rmtree(root / "val")


def _empty_class(root):
    (root / "train" / "c").mkdir()


def _val_with_other_classes(root):
    (root / "val" / "b").rename(root / "val" / "z")


def _zero_byte_image(root):
    (root / "train" / "a" / "empty.png").write_bytes(b"")


def _text_named_jpg(root):
    (root / "train" / "b" / "notes.jpg").write_text("not an image")


@pytest.mark.parametrize(
    "mistake, needles",
    [
        (_only_train, ["no val folder", "train/ and val/"]),
        (_empty_class, ["class folder(s) c", "hold no images"]),
        (_val_with_other_classes, ["only in train/: b", "only in val/: z"]),
        (_zero_byte_image, ["cannot read image", "empty.png", "delete or replace"]),
        (_text_named_jpg, ["cannot read image", "notes.jpg", "delete or replace"]),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else "",
)
def test_image_folder_mistakes(tmp_path, monkeypatch, capfd, mistake, needles):
    mistake(root := make_image_folder(tmp_path / "imgs"))
    code, err = run_on_folder(tmp_path, monkeypatch, capfd, root, "run_name=f")
    assert code == 2, err[-2000:]
    assert_one_clear_line(err, *needles)


def test_a_batch_larger_than_the_train_split_is_refused_before_the_run_dir(
    tmp_path, monkeypatch, capfd
):
    """40 photos, 2 of them held out for validation, and a batch of 64: no full batch, so no
    step would run. Refused before the run dir exists: the same command with a smaller batch
    then runs under the same run_name."""
    root = make_image_folder(tmp_path / "imgs", per_class=10)
    args = ("data=folder", f"data.root={root}", "data.image_size=16", "data.num_workers=0")
    code, err = run_train(tmp_path, monkeypatch, capfd, *args, "data.batch_size=64", "run_name=r")
    assert code == 2, err[-2000:]
    assert_one_clear_line(err, "38 images per device, fewer than data.batch_size=64")
    assert not (tmp_path / "logs" / "train" / "runs" / "r").exists()
    code, err = run_train(tmp_path, monkeypatch, capfd, *args, "data.batch_size=2", "run_name=r")
    assert code == 0, err[-2000:]


@pytest.mark.parametrize("value", ["~/photos", "'~/photos'"], ids=["unquoted", "quoted"])
def test_a_path_that_starts_with_a_tilde_says_to_write_home(tmp_path, monkeypatch, capfd, value):
    """The shell leaves ~ after key= as it is: unquoted, Hydra's grammar cannot read it;
    quoted, it would name a folder ~ in the working directory and read as missing."""
    args = ("experiment=vicreg_folder", f"data.root={value}", "run_name=r")
    code, err = run_train(tmp_path, monkeypatch, capfd, *args)
    assert code == 2, err[-2000:]
    assert_one_clear_line(err, "data.root=~/photos: ~ is not expanded", "data.root=$HOME/photos")
    assert not (tmp_path / "logs" / "train" / "runs" / "r").exists()
    argv = ["eval.py", f"ckpt_path={value}", f"paths.log_dir={tmp_path / 'logs'}"]
    assert run_in_process(trainlab.eval.main, argv, monkeypatch) == 2
    assert_one_clear_line(capfd.readouterr().err, "write ckpt_path=$HOME/photos")
    monkeypatch.chdir(tmp_path)  # where Hydra would make a folder named ~
    code, err = run_train(tmp_path, monkeypatch, capfd, f"hydra.run.dir={value}")
    assert code == 2, err[-2000:]
    assert_one_clear_line(err, "write hydra.run.dir=$HOME/photos")
    assert not (tmp_path / "~").exists()


def test_mixed_image_modes_and_unicode_names_train(tmp_path, monkeypatch, capfd):
    """Gray, RGBA and 16-bit PNGs in one folder, class and file names with spaces and
    non-ASCII letters: all are read (converted to data.in_chans), nothing is skipped."""
    root = make_image_folder(tmp_path / "my images", classes=("ä b", "ß c"))
    Image.fromarray(np.full((16, 16), 7, np.uint8)).save(root / "train" / "ä b" / "gray ü.png")
    Image.fromarray(np.full((16, 16, 4), 7, np.uint8)).save(root / "train" / "ä b" / "rgba.png")
    Image.fromarray(np.full((16, 16), 3000, np.uint16)).save(root / "train" / "ß c" / "16bit.png")
    code, err = run_on_folder(tmp_path, monkeypatch, capfd, root, "run_name=ok")
    assert code == 0, err[-2000:]
    from trainlab.data.imagefolder import open_split

    train = open_split(root, "train")
    assert len(train) == 11  # 4 + 4 + 3: none skipped
    assert {train[i][0].mode for i in range(len(train))} == {"RGB"}  # every one decodes


@pytest.mark.parametrize(
    "split, content, workers",
    [("train", b"not a png at all", 0), ("val", b"\x89PNG truncated", 1)],
    ids=["in-process", "in-a-worker-process"],
)
def test_unreadable_image(tmp_path, monkeypatch, capfd, split, content, workers):
    root = make_image_folder(tmp_path / "imgs")
    (root / split / "a" / "broken.png").write_bytes(content)
    code, err = run_train(
        tmp_path,
        monkeypatch,
        capfd,
        "data=imagefolder",
        f"data.root={root}",
        "data.num_classes=2",
        "data.image_size=32",
        "data.batch_size=4",
        f"data.num_workers={workers}",
        "data.persistent_workers=false",
    )
    assert code == 2
    assert_one_clear_line(err, "broken.png")


def test_eval_missing_checkpoint(tmp_path, monkeypatch, capfd):
    argv = ["eval.py", f"ckpt_path={tmp_path / 'nope.ckpt'}", f"paths.log_dir={tmp_path}"]
    code = run_in_process(trainlab.eval.main, argv, monkeypatch)
    err = capfd.readouterr().err
    assert code == 2
    assert_one_clear_line(err, "nope.ckpt", "does not exist")


class _RunsCodeWhenUnpickled:
    """Unpickling this opens (creates) a file: what a malicious checkpoint could do."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _checkpoint_that_runs_code(path, marker):
    import torch

    torch.save({"state_dict": {}, "payload": _RunsCodeWhenUnpickled(marker)}, path)


def _truncated_checkpoint(path, marker):
    import torch

    torch.save({"state_dict": {"w": torch.zeros(1000)}}, path)
    path.write_bytes(path.read_bytes()[:2000])


def _damaged_checkpoint(path, marker):
    """64 bytes flipped in the middle of a tensor: torch.load reads it without a word."""
    import torch

    torch.save({"state_dict": {"w": torch.zeros(100_000)}}, path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(
        b ^ 0xFF for b in data[len(data) // 2 : len(data) // 2 + 64]
    )
    path.write_bytes(bytes(data))


def _empty_checkpoint(path, marker):
    path.write_bytes(b"")


def _random_bytes(path, marker):
    path.write_bytes(np.random.default_rng(0).bytes(5000))


@pytest.mark.parametrize(
    "make, needles",
    [
        (_checkpoint_that_runs_code, ["could run code"]),
        (_truncated_checkpoint, ["empty or truncated"]),
        (_empty_checkpoint, ["empty or truncated"]),
        (_damaged_checkpoint, ["is damaged", "CRC-32"]),
        (_random_bytes, ["not a PyTorch checkpoint"]),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else "",
)
@pytest.mark.slow  # 7 s: make test-slow, which CI runs
@pytest.mark.parametrize(
    "use",
    [
        "eval mode=test",
        "eval mode=features",
        *(["train init_from"] if "finetune" in EXPERIMENTS else []),
    ],
)
def test_bad_checkpoints_are_refused_in_one_line(
    tmp_path, monkeypatch, capfd, cfg_factory, make, needles, use
):
    """Before anything is built or written: no eval run dir, and the pickle's code never ran."""
    from omegaconf import OmegaConf

    run_dir, marker = tmp_path / "run", tmp_path / "code_ran"
    (run_dir / "checkpoints").mkdir(parents=True)
    OmegaConf.save(cfg_factory(*FAST), run_dir / "config.yaml")
    make(ckpt := run_dir / "checkpoints" / "last.ckpt", marker)
    logs = tmp_path / "logs"
    if use.startswith("eval"):
        argv = ["eval.py", f"ckpt_path={ckpt}", f"paths.log_dir={logs}", use.split()[1]]
        code = run_in_process(trainlab.eval.main, argv, monkeypatch)
        err = capfd.readouterr().err
        assert not list(logs.glob("eval/runs/*"))  # the run dir Hydra made is gone again
    else:
        finetune = ("experiment=finetune", f"model.init_from={ckpt}", "data.num_workers=0")
        code, err = run_train(tmp_path, monkeypatch, capfd, *finetune)
    assert code == 2 and not marker.exists(), err[-2000:]
    assert_one_clear_line(err, str(ckpt), *needles)


def test_a_missing_mandatory_value_names_its_key(tmp_path, monkeypatch, capfd):
    code = run_in_process(trainlab.eval.main, ["eval.py", f"paths.log_dir={tmp_path}"], monkeypatch)
    assert code == 2
    assert_one_clear_line(capfd.readouterr().err, "ckpt_path is not set", "ckpt_path=<value>")


def test_classes_that_cannot_be_counted_ask_for_num_classes(tmp_path, monkeypatch, capfd):
    code, err = run_train(tmp_path, monkeypatch, capfd, "data=imagefolder", "data.root=s3://b/x")
    assert code == 2
    assert_one_clear_line(err, "s3://b/x", "add data.num_classes=")


def files_and_bytes(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow  # 8 s: make test-slow, which CI runs
def test_existing_run_dir_is_never_overwritten(tmp_path, monkeypatch, capfd):
    """Every file of the run, its train.log included, is bytewise unchanged by a refused run."""
    code, _ = run_train(tmp_path, monkeypatch, capfd, "run_name=mine")
    assert code == 0
    run_dir = tmp_path / "logs" / "train" / "runs" / "mine"
    before = files_and_bytes(run_dir)
    assert run_dir / "train.log" in before and run_dir / "metrics.json" in before

    code, err = run_train(tmp_path, monkeypatch, capfd, "run_name=mine", "trainer.max_epochs=2")
    assert code == 2
    assert_one_clear_line(err, str(run_dir), "run_name")
    assert files_and_bytes(run_dir) == before

    # Resuming a finished run: refused by a file check, before torch.
    code, err = run_train(tmp_path, monkeypatch, capfd, "run_name=mine", "resume=true")
    assert code == 2
    assert_one_clear_line(err, str(run_dir), "finished run", "resume_from=")
    assert files_and_bytes(run_dir) == before

    # Resuming an unfinished one as another model would load its weights into the wrong
    # shape: refused.
    stopped = run_dir.parent / "stopped"
    shutil.copytree(run_dir, stopped)
    (stopped / "metrics.json").unlink()
    before_stopped = files_and_bytes(stopped)
    other = ("run_name=stopped", "resume=true", "model.encoder.depth=1", "seed=3")
    code, err = run_train(tmp_path, monkeypatch, capfd, *other)
    assert code == 2
    assert_one_clear_line(err, "model.encoder.depth=1 (run: 4)", "seed=3 (run: 42)", "run_name")
    assert files_and_bytes(run_dir) == before and files_and_bytes(stopped) == before_stopped


def test_a_full_disk_is_one_line_and_leaves_no_partial_checkpoint(tmp_path, monkeypatch, capfd):
    """The first checkpoint (about 37 MB) does not fit on an 8 MB disk: one line naming the
    path and the fix, not the follow-on failure of the on_exception save; no temporary file
    is left behind."""
    with small_disk(tmp_path / "logs", "8m"):
        code, err = run_train(tmp_path, monkeypatch, capfd, "run_name=full")
        assert code == 2
        assert_one_clear_line(err, "No space left on device", "paths.log_dir")
        assert "on_exception" not in err  # the first failure is named, not the follow-on
        checkpoints = tmp_path / "logs" / "train" / "runs" / "full" / "checkpoints"
        assert list(checkpoints.iterdir()) == []


def test_a_user_error_quoting_a_multi_line_cause_is_printed_whole():
    """A download's error quoted inside a DataError spans lines: the line printed was its
    last, ``); copy the files there by hand``. A worker's traceback still gives its last."""
    from trainlab.utils.errors import DataError, one_line

    error = DataError("mnist not found at /d (the download failed (HTTP 503\nretry later)); copy")
    assert (
        one_line(error)
        == "mnist not found at /d (the download failed (HTTP 503 retry later)); copy"
    )
    worker = DataError(
        "Caught DataError in worker.\nTraceback (most recent call last):\n  x\nDataError: fix"
    )
    assert one_line(worker) == "fix"


def test_a_file_size_limit_hit_while_saving_is_the_disk_line(tmp_path, monkeypatch, capfd):
    """``ulimit -f`` stops the first checkpoint with EFBIG ("File too large"): the same one
    line as a full disk, naming the limit, not an OSError."""
    import resource
    import signal

    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4 * 2**20, limits[1]))
    try:
        code, err = run_train(tmp_path, monkeypatch, capfd, "run_name=big")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, old)
    assert code == 2
    assert_one_clear_line(err, "File too large", "ulimit -f", "paths.log_dir")


UNBUILDABLE = [
    # I-JEPA and MAE mask a ViT's tokens: a CNN failed on a config interpolation
    (
        ["experiment=ijepa_digits", "model/encoder=resnet"],
        ["ResNet", "I-JEPA", "model/encoder=vit"],
    ),
    (
        ["experiment=mae_digits", "model/encoder=convnext"],
        ["ConvNeXt", "MAE", "model/encoder=vit"],
    ),
    # a key a class does not take: its node and class, not a TypeError
    (
        ["+model.encoder.pretrained=true"],
        ["model.encoder.pretrained is not an argument of ViTEncoder"],
    ),
    (["+model.expander.foo=1"], ["model.expander.foo is not an argument of Expander"]),
]
# A part's cases (experiment=mae_digits) while the part is there (docs/fork.md).
UNBUILDABLE = [
    case for case in UNBUILDABLE
    if all(o.split("=", 1)[1] in EXPERIMENTS for o in case[0] if o.startswith("experiment="))
]  # fmt: skip


@pytest.mark.parametrize(
    "overrides, needles",
    UNBUILDABLE,
)
def test_a_model_that_cannot_be_built_names_the_key(
    tmp_path, monkeypatch, capfd, overrides, needles
):
    code, err = run_train(tmp_path, monkeypatch, capfd, "run_name=wrong", *overrides)
    assert code == 2
    assert_one_clear_line(err, *needles)
    assert not (tmp_path / "logs").exists()


def test_a_read_only_disk_or_run_dir_is_one_line_and_changes_nothing(tmp_path, monkeypatch, capfd):
    """A new run on a read-only disk (Hydra cannot make its dir), and resume=true of a run
    whose disk turned read-only: one line each, and the run's files are bytewise the same."""
    stop = ("+callbacks.stop._target_=signal_at_step.SignalAtStep", "+callbacks.stop.step=1")
    with small_disk(tmp_path / "logs", "128m") as disk:  # two 37 MB checkpoints
        # stopped by SIGTERM: an unfinished run, which resume=true may continue
        assert run_train(tmp_path, monkeypatch, capfd, "run_name=mine", *stop)[0] == 143
        run_dir = disk / "train" / "runs" / "mine"
        before = files_and_bytes(run_dir)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        code, err = run_train(tmp_path, monkeypatch, capfd, "run_name=new")
        assert code == 2
        assert_one_clear_line(err, "Read-only file system", str(disk / "train" / "runs"))
        resume = ("run_name=mine", "resume=true", "trainer.max_epochs=2")
        code, err = run_train(tmp_path, monkeypatch, capfd, *resume)
        assert code == 2
        assert_one_clear_line(err, "Read-only file system", str(run_dir))
        assert files_and_bytes(run_dir) == before


@pytest.mark.parametrize("value", ["bf17-mixed"])
def test_bad_precision_literal(tmp_path, monkeypatch, capfd, value):
    code, err = run_train(tmp_path, monkeypatch, capfd, f"trainer.precision={value}")
    assert code == 2
    assert_one_clear_line(err, "trainer.precision", value)


@pytest.mark.parametrize(
    "experiment", [e for e in ("ijepa", "linear_probe_in1k", "finetune_in1k") if e in EXPERIMENTS]
)
def test_imagenet_experiments_without_imagenet_stop_at_once_naming_data_root(
    tmp_path, monkeypatch, capfd, experiment
):
    code, err = run_train(tmp_path, monkeypatch, capfd, f"experiment={experiment}")
    assert code == 2
    assert_one_clear_line(err, "imagenet", "data.root")


def test_multirun_under_torchrun_is_refused(tmp_path, monkeypatch, capfd):
    """Under torchrun every process would run the sweep on its own; refuse before training."""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    argv = ["train.py", "-m", *FAST, f"paths.log_dir={tmp_path / 'logs'}", "seed=1,2"]
    code = run_in_process(trainlab.commands.train_command, argv, monkeypatch)
    err = capfd.readouterr().err
    assert code == 2
    assert_one_clear_line(err, "multirun", "torchrun")
    assert not list((tmp_path / "logs").rglob("metrics.json"))


@pytest.mark.slow  # 5 s: make test-slow, which CI runs
@pytest.mark.parametrize(
    "overrides, needles",
    [
        (["trainer.accelerator=cpu", "trainer.devices=999"], ["trainer.devices=999", "cores"]),
        (["trainer.accelerator=gpu"], ["GPU", "trainer.accelerator=cpu"]),
        (["trainer.accelerator=cpu", "trainer.precision=16-mixed"], ["16-mixed", "bf16-mixed"]),
        (["trainer.num_nodes=2"], ["num_nodes=2", "torchrun"]),
        (
            ["strategy=ddp", "strategy.static_graph=true", "trainer.accumulate_grad_batches=2"],
            ["static_graph", "accumulate_grad_batches"],
        ),
        (["strategy=auto", "+strategy.comm_hook=powersgd"], ["strategy.comm_hook"]),
    ],
)
def test_launch_combinations_that_cannot_work_are_refused(
    tmp_path, monkeypatch, capfd, overrides, needles
):
    """Refused before any process starts or any run dir is written: one line, exit 2."""
    if "trainer.accelerator=gpu" in overrides:
        monkeypatch.setattr("torch.cuda.device_count", lambda: 0)
    code, err = run_train(tmp_path, monkeypatch, capfd, "run_name=bad", *overrides)
    assert code == 2, err[-2000:]
    assert_one_clear_line(err, *needles)
    assert not (tmp_path / "logs" / "train" / "runs" / "bad").exists()  # not even train.log


def test_a_missing_optional_package_names_its_pip_command(tmp_path, monkeypatch, capfd):
    """logger=wandb without wandb: one line with the pip command, exit 2, nothing written."""
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    code, err = run_train(tmp_path, monkeypatch, capfd, "logger=wandb", "run_name=w")
    assert code == 2
    assert_one_clear_line(err, "logger=wandb needs the package wandb", 'pip install "wandb')
    assert not (tmp_path / "logs" / "train" / "runs" / "w").exists()


@pytest.mark.parametrize("override", ["model.optimizer.lr=-1", "data=mnst5k", "seed=-1"])
def test_a_refusal_comes_before_torch_is_imported(tmp_path, override):
    """Hydra's parsing and the checks that need no torch refuse a bad run before torch and
    Lightning are imported (their imports take seconds): the refused process never loads them."""
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['train.py', {override!r}, 'paths.log_dir={tmp_path}']\n"
        "try:\n    runpy.run_path('train.py', run_name='__main__')\n"
        "except SystemExit as e:\n    print('exit', e.code)\n"
        "print('loaded', 'torch' in sys.modules or 'lightning' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert "exit 2" in out.stdout and "loaded False" in out.stdout, out.stdout + out.stderr


def test_a_directory_as_checkpoint_is_called_a_directory(tmp_path):
    folder = subprocess.run(
        [sys.executable, str(ROOT / "eval.py"), f"ckpt_path={tmp_path}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert folder.returncode == 2
    assert_one_clear_line(folder.stderr, f"ckpt_path={tmp_path} is a directory")


def test_a_fifo_where_the_tools_read_a_file_is_one_line_not_a_hang(tmp_path):
    """A FIFO blocks its reader until someone writes: eval.py's checkpoint and the export's
    checkpoint are refused at once, each naming the file (the runs table's: test_runs.py)."""
    fifo = tmp_path / "last.ckpt"
    os.mkfifo(fifo)
    done = run_cli("eval.py", f"ckpt_path={fifo}", f"paths.log_dir={tmp_path}", timeout=60)
    assert done.returncode == 2 and "is a FIFO" in done.stderr.strip().splitlines()[-1]
    done = run_cli("scripts/export_encoder.py", str(fifo), str(tmp_path / "e.pth"), timeout=60)
    assert done.returncode == 2 and f"weights file {fifo} is a FIFO" in done.stderr


def test_a_run_config_that_is_a_fifo_is_one_line_for_eval_and_init_from(tmp_path):
    """A checkpoint whose run dir holds a FIFO as config.yaml: eval.py and model.init_from
    refuse it, naming the file, exit 2 (read as absent, eval said "no config.yaml" and
    init_from trained with its own encoder shape)."""
    import torch

    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    torch.save({"state_dict": {}}, ckpt)
    os.mkfifo(tmp_path / "run" / "config.yaml")
    logs = tmp_path / "logs"
    probe = [("train.py", "experiment=linear_probe", "model.init_from")]  # the classifier part
    for entry, *args in [
        ("eval.py", "ckpt_path"),
        *(probe if "linear_probe" in EXPERIMENTS else []),
    ]:
        *given, key = args
        done = run_cli(entry, *given, f"{key}={ckpt}", f"paths.log_dir={logs}", timeout=120)
        assert done.returncode == 2, done.stderr[-2000:]
        assert_one_clear_line(done.stderr, "config.yaml is a FIFO", "regular file")
    assert not list(logs.glob("*/runs/*"))


def test_a_damaged_checkpoint_is_refused_wherever_it_is_read(tmp_path):
    """A checkpoint with flipped bytes (torch.load would read it silently): the check before
    a resume, an init_from, eval and the export (check_readable, read_state) names the file
    and the damaged record; the intact one reads."""
    import torch

    from trainlab.networks.weights import check_readable, read_state
    from trainlab.utils.errors import UserError

    intact, damaged = tmp_path / "intact.ckpt", tmp_path / "damaged.ckpt"
    torch.save({"state_dict": {"w": torch.arange(100_000.0)}}, intact)
    _damaged_checkpoint(damaged, None)
    assert torch.load(damaged, weights_only=True)["state_dict"]["w"].shape == (100_000,)
    for read in (check_readable, read_state):
        assert read(intact)["state_dict"]["w"][-1] == 99_999
        with pytest.raises(UserError, match=f"checkpoint {damaged} is damaged: its record "):
            read(damaged)
