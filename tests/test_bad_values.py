"""One table of bad inputs. Each row is run twice through train.py: under a new run_name
(nothing may be created; make test for every other row, make test-slow for the rest) and
under the name of a finished run (every file of it must stay bytewise the same; make
test-slow). Both times: exit 2 and one line that names the key or the file; under
the finished run's name, a value that only preflight finds is refused after the run dir,
a file check of the light entry, so the line may name the run dir instead."""

import os
import re

import pytest
from conftest import CONFIGS, EXPERIMENTS, FAST, make_image_folder, run_in_process

import trainlab.commands

ROWS = [
    # learning rates, schedules and momenta
    ("model.optimizer.lr=-1", "model.optimizer.lr"),
    ("model.optimizer.lr=0", "model.optimizer.lr"),
    ("model.start_lr=-1e-4", "model.start_lr"),
    ("model.final_lr=-1e-6", "model.final_lr"),
    ("model.warmup_epochs=-1", "model.warmup_epochs"),
    ("model.weight_decay=[-0.1,0.4]", "model.weight_decay"),
    ("model.optimizer.weight_decay=-0.01", "model.optimizer.weight_decay"),
    ("experiment=ijepa_digits model.ema=[0.996,1.1]", "model.ema"),
    ("experiment=ijepa_digits model.ema=[1.0,0.996]", "backwards"),
    ("+model.schedule_scale=0.5", "model.schedule_scale"),
    ("model.bank_size=0", "model.bank_size"),
    ("experiment=ijepa_digits model.knn_k=0", "model.knn_k"),
    ("experiment=ijepa_digits model.loss=huber", "model.loss"),
    ("experiment=ijepa_digits model.target_norm=batch", "model.target_norm"),
    ("experiment=linear_probe_in1k model.optimizer.momentum=1.5", "model.optimizer.momentum"),
    ("experiment=mae_digits model.mask_ratio=1.0", "model.mask_ratio"),
    # masks
    ("experiment=ijepa_digits model.masks.num_targets=0", "model.masks.num_targets"),
    ("experiment=ijepa_digits model.masks.num_targets=-2", "model.masks.num_targets"),
    ("experiment=ijepa_digits model.masks.min_keep=0", "model.masks.min_keep"),
    ("experiment=ijepa_digits model.masks.context_scale=[0.85,1.2]", "model.masks.context_scale"),
    ("experiment=ijepa_digits model.masks.target_scale=[0,0.2]", "model.masks.target_scale"),
    ("experiment=ijepa_digits model.masks.target_scale=[0.2,0.15]", "backwards"),
    ("experiment=ijepa_digits model.masks.target_aspect=[1.5,0.75]", "model.masks.target_aspect"),
    ("experiment=ijepa_digits model.masks.context_aspect=[0,1]", "model.masks.context_aspect"),
    # the networks
    ("model.encoder.patch_size=0", "model.encoder.patch_size"),
    ("model.encoder.depth=0", "model.encoder.depth"),
    ("experiment=ijepa_digits model.predictor.depth=0", "model.predictor.depth"),
    ("model.encoder.drop_path_rate=1.5", "model.encoder.drop_path_rate"),
    ("data.image_size=18", "not a multiple"),
    ("experiment=vicreg_digits_resnet data.image_size=16", "below the stride of resnet18"),
    ("model.encoder.pach_size=7", "pach_size"),
    # data
    ("data.image_size=0", "data.image_size"),
    ("data.batch_size=0", "data.batch_size"),
    ("data.eval_batch_size=0", "data.eval_batch_size"),
    ("data.global_batch_size=0", "data.global_batch_size"),
    ("data.num_workers=-1", "data.num_workers"),
    ("data.mean=[0.5,0.5]", "data.mean"),
    ("data.std=[0.5,0.5,0.5,0.5]", "data.std"),
    ("data.crop_scale=[0,1]", "data.crop_scale"),
    ("data.crop_scale=[1.0,0.3]", "backwards"),
    ("data.val_fraction=1.5", "data.val_fraction"),
    ("data.train_fraction=0", "data.train_fraction"),
    ("data=mnst5k", "data=mnst5k"),
    ("experiment=ijepa data.batch_size=32", "data.global_batch_size=null"),
    ("data=imagefolder data.root=/nonexistent/images", "/nonexistent/images"),
    ("data=imagefolder data.root={root}/one_class data.image_size=16", "at least 2"),
    ("data=imagefolder data.root={root}/corrupt data.image_size=16", "cannot read image"),
    ("data=imagefolder data.root={root}/one_class data.num_classes=5", "data.num_classes=1"),
    ("data=imagefolder data.root=/nonexistent/images data.num_classes=3", "/nonexistent"),
    # the trainer and the run
    ("trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches"),
    ("trainer.check_val_every_n_epoch=0", "trainer.check_val_every_n_epoch"),
    ("trainer.log_every_n_steps=0", "trainer.log_every_n_steps"),
    ("trainer.max_epochs=-5", "trainer.max_epochs"),
    ("trainer.max_epochs=ten", "trainer.max_epochs"),
    ("trainer.max_epoch=3", "trainer.max_epoch"),
    ("trainer.precision=bf17-mixed", "bf17-mixed"),
    ("trainer.devices=64 trainer.accelerator=cpu", "64"),
    ("trainer.precision=16-mixed trainer.accelerator=cpu", "16-mixed"),
    ("seed=-5", "seed"),
    ("seed=4294967296", "seed"),
    ("experiment=ijepa_mnst", "experiment=ijepa_mnst"),
    ("callbacks.non_finite.action=ignore", "action"),
    ("callbacks.interruption.agree_every_n_batches=0", "agree_every_n_batches"),
    ("features.train_per_class=0", "features.train_per_class"),
    ("features.eval_per_class=-1", "features.eval_per_class"),
    ("features.knn_k=0", "features.knn_k"),
    ("model.final_lr=10", "model.final_lr=10 is above the peak model.optimizer.lr"),
    ("resume_from=nowhere.ckpt", "resume_from=nowhere.ckpt"),
    ("resume_from=/tmp", "is a directory"),
    ("resume_from={root}/fifo.ckpt", "fifo.ckpt is a FIFO"),  # a FIFO read would block
    (
        "experiment=linear_probe model.init_from={root}/fifo.ckpt",
        "is a FIFO, a socket or a device, not a file",
    ),
    ("resume=true resume_from=nowhere.ckpt", "pass one of them"),
    (
        "experiment=linear_probe model.init_from=/nonexistent/weights.pth.tar",
        "/nonexistent/weights.pth.tar",
    ),
    # found by preflight alone (checks/preflight.py): the model built, one real batch through it
    (
        "data.views=[{{}}]",
        "the first training batch",
    ),  # one view for VICReg; braces escaped: ROWS are formatted
    ("experiment=ijepa_digits model.predictor.num_heads=5", "divisible by num_heads"),
    (
        "model.encoder.size=vit_enormous",
        "model.encoder.size='vit_enormous' is not valid: input should be 'vit_tiny'",
    ),
    ("experiment=digits_classifier model.label_smoothing=1.5", "label_smoothing"),
    # types the config gives a key, held on the command line (checks/override_types.py)
    ("compile=maybe", "compile takes true or false"),
    ("~compiler +compile=true", "compile=true needs the compile part's compiler node"),
    # a config group given null: Hydra's ValueError, said in one line (checks/hydra_errors.py)
    ("data=null", "data=null is not an option of data: give one by name"),
    ("matmul_precision=fast", "matmul_precision='fast' is not valid: give one of highest"),
    # a run that fits its device no way, before its run dir (the memory fit part)
    ("memory_fit.device_gib=0.0001", "does not fit (0.0001 GiB less memory_fit.margin"),
    ("memory_fit.policy=maybe", "memory_fit.policy='maybe' is not valid"),
    ("memory_fit.margin=1.5", "memory_fit.margin=1.5 is not valid"),
    ("test=maybe", "test takes true or false"),
    ("resume=no", "resume takes true or false"),
    ("features.baselines=2", "features.baselines takes true or false"),
    ("seed=1.5", "seed takes an integer"),
    ("seed=abc", "seed takes an integer"),
    ("trainer.max_epochs=2.5", "trainer.max_epochs"),  # by the Trainer's signature
    ("model.optimizer.lr=inf", "model.optimizer.lr takes a finite number"),
    ("model.optimizer.lr=nan", "model.optimizer.lr takes a finite number"),
    (
        "experiment=ijepa_digits model.var_cov=abc",
        "model.var_cov='abc' is not valid: input should be a valid number",
    ),
    # ranges declared in the constructors' signatures (trainlab.utils.ranges), via pydantic
    ("experiment=ijepa_digits model.var_cov=-1", "model.var_cov=-1 is not valid"),
    ("experiment=ijepa_digits model.sigreg=-1", "model.sigreg=-1 is not valid"),
    ("experiment=vicreg_digits model.invariance=-1", "model.invariance=-1 is not valid"),
    ("experiment=vae_digits model.beta=-1", "model.beta=-1 is not valid"),
    ("experiment=vae_digits model.free_bits=-1", "model.free_bits=-1 is not valid"),
    ("experiment=ijepa_digits model.target_layers=0", "model.target_layers=0 is not valid"),
    ("experiment=digits_classifier model.layer_decay=0", "model.layer_decay=0 is not valid"),
    ("model.final_lr=inf", "model.final_lr=inf is not valid"),
    # one learning-rate key: the old schedule key names the three that replace it
    (
        "model.lr=[1e-4,1e-3,1e-6]",
        "model.lr is not a key of model; the peak learning rate is model.optimizer.lr",
    ),
    ("data.in_chans=0", "data.in_chans=0 is not valid"),
    (
        "experiment=ijepa_digits model.predictor.pred_dim=0",
        "model.predictor.pred_dim=0 is not valid",
    ),
    ("data.test_fraction=0", "data.test_fraction=0 is not valid"),
    ("data.test_fraction=1.5", "data.test_fraction=1.5 is not valid"),
    # rules across keys, and keys of classes trainlab does not own
    ("trainer.min_epochs=5 trainer.max_epochs=1", "trainer.min_epochs=5 is above"),
    ("trainer.gradient_clip_val=-1", "trainer.gradient_clip_val"),
    ("lr_scaling.reference_batch=0", "lr_scaling.reference_batch"),
    (
        "experiment=vicreg_digits data.views=[{{}},{{}},{{}}]",
        "VICReg reads 2 views an image, not 3",
    ),
    # the optimizer, the callbacks and the Trainer built in preflight: their own checks
    ("+model.optimizer.betas=[0.9,1.5]", "model.optimizer cannot be built"),
    ("trainer.devices=0", "trainer cannot be built"),
    ("trainer.num_nodes=0", "trainer cannot be built"),
    ("callbacks.model_checkpoint.save_top_k=-2", "callbacks.model_checkpoint cannot be built"),
    ("callbacks.model_checkpoint.mode=maximum", "callbacks.model_checkpoint cannot be built"),
    ("experiment=digits_classifier data.num_classes=5", "below the 10 classes of digits"),
    # found by the first batch only: views the encoder cannot take
    ("experiment=vicreg_digits data.views=[{{size:10}},{{size:10}}]", "the first training batch"),
    ("experiment=vicreg_digits data.views=[{{size:0}},{{size:0}}]", "item [0][size]"),
    # what the first batch used to find, now refused with the config, naming the key
    (
        "experiment=ijepa_digits model.target_layers=9",
        "model.target_layers=9 is more than the encoder's 4 blocks",
    ),
    ("experiment=vicreg_digits data.views=[{{hflip:2.0}},{{hflip:2.0}}]", "item [0][hflip]"),
    ("experiment=vicreg_digits data.views=[{{flip:0.5}},{{}}]", "extra inputs are not permitted"),
    ("data=synthetic data.train_size=1", "(data.train_size)"),
    ("data.num_classes=5", "data.num_classes=5 is below the 10 classes of digits"),
    ("run_name=" + "a" * 300, "choose a shorter run_name"),
    ("peak_tflops=abc", "peak_tflops='abc' is not valid"),
    ("peak_tflops=-1", "peak_tflops=-1 is not valid"),
    ("callbacks.progress_bar.lines_per_epoch=0", "callbacks.progress_bar.lines_per_epoch=0"),
]


# Top-level keys a part's config adds, and that config's folder.
PART_KEYS = {"compile": "compiler", "compiler": "compiler", "peak_tflops": "callbacks/throughput"}
# Data sets that are parts (data=<name>, configs/data/<name>.yaml).
PART_DATA_SETS = {"synthetic"}


def part_is_there(row: tuple[str, str]) -> bool:
    """A part's rows (experiment=vae_digits, data=synthetic, memory_fit.*,
    callbacks.progress_bar.*, compile, peak_tflops) while it is there (docs/fork.md): its
    experiments and data sets, or the config its optional default adds."""
    group = row[0].split(".")[0]
    if group in ("memory_fit",) and not (CONFIGS / group).is_dir():
        return False
    node = row[0].split()[0].split("=")[0].lstrip("~+").split(".")  # the first override's key
    if node[0] == "callbacks" and not any((CONFIGS / "callbacks").glob(f"{node[1]}*")):
        return False  # a callback part's folder: callbacks/<name>/
    if node[0] in PART_KEYS and not (CONFIGS / PART_KEYS[node[0]]).is_dir():
        return False
    chosen = set(re.findall(r"\bdata=(\w+)", row[0])) & PART_DATA_SETS
    if not all((CONFIGS / "data" / f"{name}.yaml").is_file() for name in chosen):
        return False
    return set(re.findall(r"experiment=(\w+)", row[0])) <= set(EXPERIMENTS)


ROWS = [row for row in ROWS if part_is_there(row)]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run and its files' bytes."""
    root = tmp_path_factory.mktemp("finished")
    argv = ["train.py", *FAST, f"paths.log_dir={root}", "run_name=done"]
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert run_in_process(trainlab.commands.train_command, argv, monkeypatch) == 0
    run_dir = root / "train" / "runs" / "done"
    os.mkfifo(root / "fifo.ckpt")  # reading it would block until someone writes
    make_image_folder(root / "one_class", classes=("a",))
    make_image_folder(root / "corrupt", per_class=2)
    for image in (root / "corrupt").rglob("*.png"):  # every image cut short
        image.write_bytes(image.read_bytes()[:40])
    return root, {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "run_name",
    [
        "new",
        # the same refusals under a finished run's name (every file of it kept), 60 s more
        pytest.param("done", marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize(
    "overrides, needle",
    # make test takes every other row (30 s), make test-slow the rest
    [pytest.param(*row, marks=[pytest.mark.slow] * (i % 2)) for i, row in enumerate(ROWS)],
    ids=[r[0] for r in ROWS],
)
def test_a_bad_value_is_one_line_exit_2_and_changes_nothing(
    finished, monkeypatch, capfd, overrides, needle, run_name
):
    root, files = finished
    argv = ["train.py", *FAST, f"paths.log_dir={root}", f"run_name={run_name}"]
    capfd.readouterr()
    typed = overrides.format(root=root).split()
    assert run_in_process(trainlab.commands.train_command, [*argv, *typed], monkeypatch) == 2
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error")]
    assert "Traceback" not in err and len(lines) == 1, err[-2000:]
    taken = run_name == "done" and "runs/done already holds a run" in lines[0]
    assert needle in lines[0] or taken, lines[0]
    assert not (root / "train" / "runs" / "new").exists()
    assert {p: p.read_bytes() for p in files} == files
    assert {p for p in (root / "train" / "runs" / "done").rglob("*") if p.is_file()} == set(files)
