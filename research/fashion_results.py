"""The Fashion-MNIST table: every self-supervised family frozen, beside the raw pixels, a random
encoder of each shape, a supervised encoder of each shape and fine-tuning from the best method.

    python research/fashion_results.py                     # seeds 0 1 2, every row
    python research/fashion_results.py --seeds 0           # one seed
    python research/fashion_results.py --seeds 0 --rows "raw pixels" VICReg
    python research/fashion_results.py --rows fine-tune --fine-tune-from MAE

Frozen rows are rated by the protocol of ``eval.py mode=features`` (trainlab.evaluation) on
the 10,000 test images, every choice made on the validation split that data.val_fraction
carves from train (fixed seed): linear and kNN with all 54,000 training labels, linear with a
class-balanced 10 % and 1 % of them (drawn from the seed). Trained rows are ``train.py``'s
test/acc, trained at each label fraction; the supervised encoders are also rated frozen, each
on the labels it was trained with.

Every run and every row's scores are cached under logs/fashion_results/: the same command
finishes an interrupted table instead of starting it again, and ``--seeds 1 2`` later adds
seeds to a table of seed 0. Writes research/fashion_results.md from all that is cached.
A run is kept by its name (experiment and seed), not by its config: after changing an
experiment's file, remove its runs (logs/fashion_results/runs/<experiment>_s*) and its
rows' scores (logs/fashion_results/scores/<row>_s*.json). A row with no scores cached on the
machine that writes the file keeps its lines from the file as it was, and the file says so.
"""

import argparse
import datetime
import functools
import json
import os
import shlex
import statistics
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from ijepa_results import ROOT, config_data, eval_data, low_shot, train  # research/ helpers

from trainlab.checks.checkpoint_config import load_run_config
from trainlab.data.low_shot import class_balanced_subset
from trainlab.evaluation.checkpoint import load_encoder
from trainlab.evaluation.features import encoder_views, pixel_views
from trainlab.evaluation.protocol import extract_splits, rate_features
from trainlab.utils.machine import cpu_model

# A run's config and evaluation splits, read once per run dir: every row rates on them.
run_data = functools.cache(eval_data)

TASK = "fashion_results"
SCORES = ROOT / "logs" / TASK / "scores"
FRACTIONS = (1.0, 0.1, 0.01)
# Self-supervised rows: {row: experiment}, each rated by the part its method evaluates (I-JEPA's
# and DINO's EMA target, VICReg's and MAE's encoder).
METHODS = {
    "I-JEPA": "ijepa_fashion",
    "VICReg": "vicreg_fashion",
    "DINO": "dino_fashion",
    "MAE": "mae_fashion",
    "VICReg ResNet-18": "vicreg_fashion_resnet",
    "DINO ResNet-18": "dino_fashion_resnet",
    "LeJEPA": "lejepa_fashion",
}
# Pre-trained on the 60,000 training images written out as an unlabelled folder (no labels
# kept; data=folder holds out 10 %: 54,000 train, as the labelled rows), rated as the rows
# above on the labelled splits of data=fashion_mnist: {row: the experiment whose recipe runs}.
FOLDER_ROWS = {"VICReg, unlabelled folder": "vicreg_fashion"}
# The encoder shapes, each one method's experiment composed (its encoder node, and its data at
# the shape's image size): {shape: experiment}. The raw pixels are read at the ViT's 28 px.
SHAPES = {"ViT-Tiny/7": "vicreg_fashion", "ResNet-18": "vicreg_fashion_resnet"}
BASELINES = ["raw pixels", *(f"random {shape}" for shape in SHAPES)]
SUPERVISED = [f"supervised {shape}" for shape in SHAPES]
# Supervised and fine-tuning epochs by label fraction: about as many steps at 10 % and 1 % as
# at 100 %, and validation every EVAL_EVERY[f] epochs.
EPOCHS = {1.0: 3, 0.1: 30, 0.01: 100}
EVAL_EVERY = {1.0: 1, 0.1: 10, 0.01: 25}


def score_file(row: str, seed: int) -> Path:
    return SCORES / f"{row.replace(' ', '_').replace('/', '')}_s{seed}.json"


def cached(row: str, seed: int, compute) -> dict:
    """``compute()`` for one row and seed, kept as JSON in logs/fashion_results/scores/."""
    path = score_file(row, seed)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(compute()))
    return json.loads(path.read_text())


def finished(row: str, seeds: list[int]) -> list[dict]:
    """The row's cached scores, one per seed of ``seeds`` that has them."""
    return [
        json.loads(score_file(row, s).read_text()) for s in seeds if score_file(row, s).exists()
    ]


def pretrain(experiment: str, seed: int) -> dict:
    """``python train.py experiment=<experiment> seed=<seed>``'s metrics.json (cached)."""
    # features.enabled=false: the run's own end-of-run rating is this table's 100 % columns,
    # rated again here with the low-shot ones from the same features.
    overrides = (f"experiment={experiment}", f"seed={seed}", "features.enabled=false")
    return train(f"{experiment}_s{seed}", *overrides, task=TASK)


def unlabelled_folder() -> Path:
    """The training images as PNGs in sub-folders of 1,000, no labels: written once."""
    from torchvision.datasets import FashionMNIST

    root = ROOT / "logs" / TASK / "unlabelled_folder"
    if not (root / "done").exists():
        images = FashionMNIST(str(ROOT / "data"), train=True)
        for i, (image, _label) in enumerate(images):
            (root / f"{i // 1000:02d}").mkdir(parents=True, exist_ok=True)
            image.save(root / f"{i // 1000:02d}" / f"{i:05d}.png")
        (root / "done").write_text(f"{len(images)} images\n")  # not an image: skipped
    return root


def folder_row(row: str, seed: int) -> dict:
    """``experiment=FOLDER_ROWS[row]`` pre-trained on unlabelled_folder(), its evaluated
    encoder rated frozen on the labelled Fashion-MNIST splits of the method rows."""

    def compute() -> dict:
        experiment = FOLDER_ROWS[row]
        pre = train(
            f"{experiment}_folder_s{seed}", f"experiment={experiment}", "data=folder",
            f"data.root={unlabelled_folder()}", "data.image_size=28", "data.val_fraction=0.1",
            f"seed={seed}", "features.enabled=false", task=TASK,
        )  # fmt: skip
        run_cfg = load_run_config(Path(pre["run"]["run_dir"]) / "config.yaml")  # not its data
        encoder = load_encoder(run_cfg.model.encoder, pre["checkpoints"]["last"], "evaluated")
        scores = rate_fractions(encoder_views(encoder), shape_data("ViT-Tiny/7", seed), row, seed)
        run = pre["run"]
        return {**scores, "minutes": run["fit_seconds"] / 60, "precision": run["precision"]}

    return cached(row, seed, compute)


@functools.cache
def shape_data(shape: str, seed: int) -> tuple:
    """config_data of the config ``python train.py experiment=SHAPES[shape] seed=<seed>`` runs:
    composed, not read from a trained run, so the baselines and the trained rows need no
    pre-training (the cache of runs lives in logs/ and a new machine starts without it)."""
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={SHAPES[shape]}", f"seed={seed}"])
    return config_data(cfg)


def rate_fractions(views, data: tuple, name: str, seed: int, fractions=FRACTIONS) -> dict:
    """{"linear": {fraction: test acc}, "linear_val": {fraction: val acc}, "knn": test acc
    with all the labels} of one feature extractor on ``data`` (config_data's tuple):
    features computed once, each label fraction rated on its class-balanced subset."""
    _cfg, datasets, classes = data
    feats, labels = extract_splits(views, datasets, name)
    out: dict = {"linear": {}, "linear_val": {}}
    for fraction in fractions:
        rating = rate_features(*low_shot(feats, labels, fraction, seed), classes)
        out["linear"][str(fraction)] = rating.linear.test_acc
        out["linear_val"][str(fraction)] = rating.linear.val_acc
        if fraction == 1.0:
            out["knn"] = rating.knn_acc
    return out


def method_row(row: str, seed: int) -> dict:
    """The encoder that ``experiment=METHODS[row]`` pre-trains, rated frozen."""

    def compute() -> dict:
        pre = pretrain(METHODS[row], seed)
        run_dir = Path(pre["run"]["run_dir"])
        encoder_cfg = run_data(run_dir)[0].model.encoder
        encoder = load_encoder(encoder_cfg, pre["checkpoints"]["last"], "evaluated")
        scores = rate_fractions(encoder_views(encoder), run_data(run_dir), row, seed)
        run = pre["run"]
        return {**scores, "minutes": run["fit_seconds"] / 60, "precision": run["precision"]}

    return cached(row, seed, compute)


def baseline_row(row: str, seed: int) -> dict:
    """The raw pixels, or a random encoder of a shape drawn from the seed, rated frozen."""

    def compute() -> dict:
        shape = row.removeprefix("random ")
        data = shape_data(shape if shape in SHAPES else "ViT-Tiny/7", seed)
        if row == "raw pixels":
            return rate_fractions(pixel_views, data, row, seed)
        torch.manual_seed(seed)  # as eval.py draws its random encoder
        encoder = instantiate(data[0].model.encoder).eval()
        return rate_fractions(encoder_views(encoder), data, row, seed)

    return cached(row, seed, compute)


def classifier_row(row: str, seed: int, shape: str, init: str | None = None) -> dict:
    """A classifier of ``shape`` trained by train.py at each label fraction, from scratch
    (experiment=supervised_vit) or fine-tuned from the checkpoint ``init``
    (experiment=finetune, which takes the encoder node of that checkpoint's run):
    {"trained": {fraction: test acc}}, and for scratch its encoder rated frozen at the
    fraction it was trained on."""

    def compute() -> dict:
        data = shape_data(shape, seed)
        cfg, splits, _ = data
        start = [f"model.init_from={init}"] if init else encoder_overrides(cfg.model.encoder)
        # the frozen rows' val split (the shape's data module's), so at each fraction the
        # classifier trains on the very images the frozen probes of this seed read
        split_seed = instantiate(cfg.data).split_seed
        out: dict = {"trained": {}, "minutes": {}, "linear": {}, "linear_val": {}}
        for fraction in FRACTIONS:
            # the loaders drop incomplete batches: at most the labelled subset's size
            batch_size = min(128, len(class_balanced_subset(splits["train"], fraction, seed)))
            run = train(
                f"{row.replace(' ', '_').replace('/', '')}_f{fraction}_s{seed}",
                f"experiment={'finetune' if init else 'supervised_vit'}",
                "data=fashion_mnist",
                f"data.image_size={cfg.data.image_size}",
                "data.hflip=true",
                *start,
                f"data.train_fraction={fraction}",
                f"data.seed={seed}",
                f"data.split_seed={split_seed}",
                f"seed={seed}",
                f"data.batch_size={batch_size}",
                f"trainer.max_epochs={EPOCHS[fraction]}",
                f"trainer.check_val_every_n_epoch={EVAL_EVERY[fraction]}",
                "trainer.precision='${cpu_precision:${trainer.accelerator}}'",
                "features.enabled=false",  # its encoder is rated here, at its label fraction
                task=TASK,
            )
            out["trained"][str(fraction)] = run["metrics"]["test/acc"]
            out["minutes"][str(fraction)] = run["run"]["fit_seconds"] / 60
            out["precision"] = run["run"]["precision"]
            if init is None:
                encoder = load_encoder(cfg.model.encoder, run["checkpoints"]["last"], "encoder")
                frozen = rate_fractions(encoder_views(encoder), data, row, seed, [fraction])
                out["linear"] |= frozen["linear"]
                out["linear_val"] |= frozen["linear_val"]
                out["knn"] = frozen.get("knn", out.get("knn"))
        return out

    return cached(row, seed, compute)


def encoder_overrides(encoder) -> list[str]:
    """A from-scratch classifier's encoder node, as the shape's run built its encoder."""
    if encoder.get("model_name") == "resnet18":
        # supervised_vit's ViT keys go: a ResNet takes none of them
        vit_keys = ("patch_size", "size", "depth")
        return [
            "model/encoder@model.net.encoder=resnet",
            *(f"~model.net.encoder.{k}" for k in vit_keys),
        ]
    keys = ("patch_size", "size", "depth", "stem_width")
    return [f"model.net.encoder.{k}={'null' if encoder[k] is None else encoder[k]}" for k in keys]


def best_method() -> str | None:
    """The method whose 100 % linear probe reads best on val (test never chooses) on seed 0,
    once every method has it; None until then. One seed chooses, so every seed of the
    fine-tune row starts from the same method however many seeds have run: the methods' val
    means lie within noise of each other, so a mean over the seeds so far would switch the
    source as seeds arrive."""
    scores = {row: finished(row, [0]) for row in METHODS}
    if not all(scores.values()):
        return None
    return max(scores, key=lambda row: scores[row][0]["linear_val"]["1.0"])


def fmt(values: list[float], digits: int = 3) -> str:
    """Mean ± population std; one value alone, with no spread to claim."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.pstdev(values):.{digits}f}"


def table_lines(row: str, done: list[dict]) -> tuple[list[str], list[str]]:
    """The row's table lines (mean ± std over its seeds), a frozen one and a trained one
    where it has them, and the per-seed lines."""
    lines, per_seed = [], []
    for key in ("linear", "trained"):
        if not done[0].get(key):
            continue
        name = f"{row}, frozen" if key == "linear" and "trained" in done[0] else row
        cells = [fmt([s[key][str(f)] for s in done]) for f in FRACTIONS]
        knn = fmt([s["knn"] for s in done]) if key == "linear" else "-"
        minutes = "-"  # pre-training, or training at each label fraction
        if key == "trained" or ("minutes" in done[0] and "trained" not in done[0]):
            minutes = minutes_cell(done, trained=key == "trained")
        lines.append(
            f"| {name} | {len(done)} | {cells[0]} | {knn} | {cells[1]} | {cells[2]} | {minutes} |"
        )
        per = [f"{f:.0%}: " + ", ".join(f"{s[key][str(f)]:.3f}" for s in done) for f in FRACTIONS]
        if key == "linear":
            per.append("kNN: " + ", ".join(f"{s['knn']:.3f}" for s in done))
        per_seed.append(f"- {name}: " + "; ".join(per))
    return lines, per_seed


def minutes_cell(done: list[dict], trained: bool) -> str:
    """The row's minutes, mean ± std over the seeds of each precision: on a CPU without bf16
    instructions the experiments fit in 32-true, about 3 times slower, and one mean over both
    would describe neither machine."""
    by_precision: dict[str, list[dict]] = {}
    for s in done:
        by_precision.setdefault(s.get("precision", "-"), []).append(s)
    cells = []
    for precision, seeds in by_precision.items():
        if trained:
            cell = " / ".join(fmt([s["minutes"][str(f)] for s in seeds], 1) for f in FRACTIONS)
        else:
            cell = fmt([s["minutes"] for s in seeds], 1)
        cells.append(cell if len(by_precision) == 1 else f"{cell} in {precision}")
    return "; ".join(cells)


def main() -> None:
    rows = [*BASELINES, *METHODS, *FOLDER_ROWS, *SUPERVISED, "fine-tune"]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument("--rows", nargs="*", default=rows, choices=rows,
                        help="which rows to compute (the file shows every cached one)")  # fmt: skip
    parser.add_argument("--fine-tune-from", choices=list(METHODS),
                        help="the fine-tune row's method, where this machine has not every "
                        "method's seed 0 cached to choose it (docs/results.md says which "
                        "reads best on val)")  # fmt: skip
    args = parser.parse_args()
    choose = (lambda: args.fine_tune_from) if args.fine_tune_from else best_method
    table_seeds = sorted({*args.seeds, 0, 1, 2})  # the seeds the table's file shows
    for seed in args.seeds:
        for row in args.rows:
            if row in METHODS:
                method_row(row, seed)
            elif row in FOLDER_ROWS:
                folder_row(row, seed)
            elif row in BASELINES:
                baseline_row(row, seed)
            elif row in SUPERVISED:
                classifier_row(row, seed, row.removeprefix("supervised "))
            elif best := choose():
                init = pretrain(METHODS[best], seed)["checkpoints"]["last"]
                shape = "ResNet-18" if "ResNet" in best else "ViT-Tiny/7"
                classifier_row(f"fine-tune from {best}", seed, shape, init)
    write(table_seeds, choose(), given=bool(args.fine_tune_from))


def write(seeds: list[int], best: str | None, given: bool = False) -> None:
    """research/fashion_results.md from every cached row and seed; a row with nothing cached
    here keeps its lines from the file as it was (kept_lines)."""
    out = ROOT / "research" / "fashion_results.md"
    old_table, old_per_seed, old_note = kept_lines(out)
    lines = ["| encoder | seeds | 100 % linear | 100 % kNN | 10 % linear | 1 % linear | minutes |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    per_seed, kept = [], []
    fine_tunes = (
        [f"fine-tune from {best}"]
        if best
        else [name for name in old_table if name.startswith("fine-tune from")]
    )
    for row in [*BASELINES, *METHODS, *FOLDER_ROWS, *SUPERVISED, *fine_tunes]:
        if done := finished(row, seeds):
            more, per = table_lines(row, done)
            lines += more
            per_seed += per
        elif names := [n for n in (f"{row}, frozen", row) if n in old_table]:
            lines += [old_table[n] for n in names]
            per_seed += [old_per_seed[n] for n in names if n in old_per_seed]
            kept.append(row)
    precisions = sorted({s["precision"] for row in METHODS for s in finished(row, seeds)})
    text = [
        "# Fashion-MNIST: every family frozen, beside its baselines",
        "",
        "Written by `python research/fashion_results.py` from the runs and scores it has "
        f"cached (last call: `{shlex.join(sys.argv[1:]) or 'no arguments'}`) on "
        f"{datetime.date.today()}: {cpu_model()}, {os.cpu_count()} CPU cores, torch "
        f"{torch.__version__}, no GPU; pre-training in {', '.join(precisions) or '-'}. Test split "
        "(10,000 images), mean ± std over the seeds each row has. Frozen rows: the protocol of "
        "`eval.py mode=features` (linear grid and kNN view chosen on val, DINO kNN k=20); "
        "10 % and 1 %: class-balanced subsets of the 54,000 training labels drawn from the "
        "seed. Trained rows: test/acc of train.py (supervised_vit / finetune, epochs by label "
        f"fraction {EPOCHS}). Minutes: fitting, a method's pre-training or a trained row's "
        "training at 100 / 10 / 1 % of the labels. Fine-tuning starts from "
        + (
            "the method --fine-tune-from names"
            if given
            else "the method whose 100 % linear probe reads best on val on seed 0"
        )  # fmt: skip
        + ". Each pre-training is "
        "`python train.py experiment=<its experiment> seed=<seed>` "
        "(research/fashion_results.py's METHODS); an unlabelled folder row's is its "
        "experiment on the 60,000 training images written out as PNGs without labels, "
        "`data=folder data.image_size=28 data.val_fraction=0.1` (54,000 train; FOLDER_ROWS).",
        "",
    ]
    if kept:
        text += [
            f"Rows with no scores cached on this machine, kept from the file as it was: "
            f"{', '.join(kept)}. What the file said of them:",
            "",
            *old_note,
            "",
        ]
    text += [*lines, "", "Per seed (test accuracy):", "", *per_seed]
    out.write_text("\n".join(text) + "\n")
    print("\n".join(text))


def kept_lines(path: Path) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """The file's table lines and per-seed lines by row name, and its notes as a quote: the
    note it already quotes, or else its own paragraphs above the table."""
    table, per_seed, quoted, own = {}, {}, [], []
    text = path.read_text().splitlines() if path.exists() else []
    for line in text:
        if line.startswith("| ") and not line.startswith("| encoder"):
            table[line.split(" | ")[0].removeprefix("| ")] = line
        elif line.startswith("- ") and ": " in line:
            per_seed[line[2:].split(": ")[0]] = line
        elif line.startswith(">"):
            quoted.append(line)
        elif line and not line.startswith(("#", "|", "Rows with no", "Per seed")):
            own += [">", f"> {line}"] if own else [f"> {line}"]  # one paragraph a line
    return table, per_seed, quoted or own


if __name__ == "__main__":
    main()
