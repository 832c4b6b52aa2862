"""The README's I-JEPA table: frozen features, supervised and fine-tuned ViTs at 100/10/1 % labels.

    python research/ijepa_results.py                            # mnist5k and digits, seeds 0 1 2
    python research/ijepa_results.py --datasets digits --seeds 0
    python research/ijepa_results.py --methods-only --datasets mnist5k   # the VICReg rows only

For each data set and seed:
1. pre-train with ``python train.py experiment=<recipe> seed=<seed>`` (as a user would);
2. rate frozen features with the protocol of ``eval.py mode=features`` (trainlab.evaluation):
   raw pixels, a random encoder of the same shape, the I-JEPA target and context encoders,
   and the encoders of other families (METHODS: VICReg), each pre-trained by its own
   experiment on the same data with the same ViT.
   Features are computed once; each label fraction then fits the linear grid and the kNN bank
   on a class-balanced subset of the train split (drawn from the seed, as data.train_fraction
   draws it). Standardisation and hyper-parameter choice use the full unlabelled train split
   and the labelled val split at every fraction;
3. ``train.py experiment=supervised_vit`` (from scratch) and ``experiment=finetune`` from the
   I-JEPA target encoder and from random weights, same ViT, at each fraction; the supervised
   ViT's encoder is also rated frozen, by the protocol, on the labels it was trained with;
4. agreement of the monitors with the protocol (same last.ckpt): the online val/probe_acc and
   val/knn_acc against features/*, and ``experiment=linear_probe`` at 100 % against the offline
   linear probe.

Writes research/ijepa_results.md. Runs go to logs/ijepa_results/ (kept, so a table is traceable).
"""

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

import torch
from hydra.utils import instantiate
from torch.utils.data import TensorDataset

from trainlab.checks.checkpoint_config import load_run_config
from trainlab.data.low_shot import class_balanced_subset
from trainlab.evaluation.checkpoint import load_encoder
from trainlab.evaluation.features import encoder_views, pixel_views
from trainlab.evaluation.protocol import extract_splits, rate_features
from trainlab.utils.machine import cpu_model

ROOT = Path(__file__).resolve().parents[1]
RECIPES = {"mnist5k": "ijepa_mnist", "digits": "ijepa_digits"}
FRACTIONS = (1.0, 0.1, 0.01)
# Supervised and fine-tuning epochs by label fraction: about the same number of steps at 10 %
# and 1 % as a few epochs at 100 %, and validation every EVAL_EVERY[f] epochs.
EPOCHS = {1.0: 10, 0.1: 30, 0.01: 100}
EVAL_EVERY = {1.0: 1, 0.1: 5, 0.01: 20}
FROZEN_ROWS = ("raw pixels", "random encoder", "I-JEPA target encoder", "I-JEPA context encoder")
# The supervised ViT's encoder, frozen and rated by the same protocol on the same labels it was
# trained with: what the labels themselves give these features, the ceiling a kNN bar reads
# against.
SUPERVISED_FROZEN = "supervised ViT from scratch, frozen"
# Other families, pre-trained by their own experiment on the same data and ViT and rated frozen by
# the same protocol, as rows beside I-JEPA's: {row: {data set: experiment}}.
METHODS = {
    "VICReg encoder": {"mnist5k": "vicreg_mnist", "digits": "vicreg_digits"},
    "DINO teacher": {"mnist5k": "dino_mnist", "digits": "dino_digits"},
    # Another encoder family (a timm ResNet-18), with its own random baseline of the same
    # shape: the random row reads the same run's config, untrained.
    "VICReg ResNet-18": {"mnist5k": "vicreg_mnist_resnet"},
    "random ResNet-18": {"mnist5k": "vicreg_mnist_resnet"},
}
# The checkpoint part each row rates: the network the method evaluates (saved in the
# checkpoint as ``evaluated``); None: a random encoder of the run's shape.
RATED_PART = {"DINO teacher": "evaluated", "random ResNet-18": None}
TRAINED_ROWS = {  # row: (experiment, starts from the I-JEPA checkpoint?)
    "supervised ViT from scratch": ("supervised_vit", False),
    "fine-tune from I-JEPA": ("finetune", True),
    "fine-tune from random": ("finetune", False),
}


def train(name: str, *overrides: str, task: str = "ijepa_results") -> dict:
    """``python train.py ...`` into logs/<task>/runs/<name>; its metrics.json (cached: a run
    dir that holds one is not trained again)."""
    run_dir = ROOT / "logs" / task / "runs" / name
    if not (run_dir / "metrics.json").exists():
        command = [sys.executable, "train.py", *overrides, "extras.print_config=false"]
        command += [f"paths.log_dir={ROOT / 'logs'}", f"task_name={task}", f"run_name={name}"]
        print("+", " ".join(command), flush=True)
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return json.loads((run_dir / "metrics.json").read_text())


def low_shot(feats: dict, labels: dict, fraction: float, seed: int) -> tuple[dict, dict]:
    """The cached features with the train split cut to ``fraction`` of each class."""
    if fraction == 1.0:
        return feats, labels
    index = TensorDataset(torch.arange(len(labels["train"])), labels["train"])
    keep = torch.tensor(class_balanced_subset(index, fraction, seed).indices)
    feats = {v: {**s, "train": s["train"][keep]} for v, s in feats.items()}
    return feats, {**labels, "train": labels["train"][keep]}


def eval_data(run_dir: Path) -> tuple:
    """(run config, {split: dataset} with the evaluation transform, number of classes)."""
    return config_data(load_run_config(run_dir / "config.yaml"))


def config_data(cfg) -> tuple:
    """(cfg, {split: dataset} of its data node with the evaluation transform, classes)."""
    datamodule = instantiate(cfg.data)
    datamodule.setup()
    return cfg, datamodule.eval_splits(), datamodule.num_classes


def rate_fractions(views, datasets: dict, classes: int, row: str, seed: int, fractions=FRACTIONS):
    """{fraction: (linear test acc, kNN test acc)} of one feature extractor: features computed
    once, each label fraction rated on its class-balanced subset."""
    feats, labels = extract_splits(views, datasets, row)
    out = {}
    for fraction in fractions:
        r = rate_features(*low_shot(feats, labels, fraction, seed), classes)
        out[fraction] = (r.linear.test_acc, r.knn_acc)
    return out


def cached(path: Path, compute) -> dict:
    """``compute()``, kept as JSON at ``path`` (the grids take minutes per seed on a CPU);
    fraction keys come back as floats, scores as tuples."""
    if not path.exists():
        path.write_text(json.dumps(compute()))

    def parse(d: dict) -> dict:
        return {
            float(k) if k[0].isdigit() else k: parse(v) if isinstance(v, dict) else tuple(v)
            for k, v in d.items()
        }

    return parse(json.loads(path.read_text()))


def frozen_scores(run_dir: Path, seed: int) -> dict[str, dict[float, tuple[float, float]]]:
    """{row: {fraction: (linear test acc, kNN test acc)}} for the frozen rows, cached in the
    run dir."""

    def compute() -> dict:
        cfg, datasets, classes = eval_data(run_dir)
        ckpt = str(run_dir / "checkpoints" / "last.ckpt")
        torch.manual_seed(seed)  # the random encoder, as eval.py draws it
        extractors = {
            "raw pixels": pixel_views,
            "random encoder": encoder_views(instantiate(cfg.model.encoder).eval()),
            "I-JEPA target encoder": encoder_views(
                load_encoder(cfg.model.encoder, ckpt, "target_encoder")
            ),
            "I-JEPA context encoder": encoder_views(
                load_encoder(cfg.model.encoder, ckpt, "encoder")
            ),
        }
        return {r: rate_fractions(v, datasets, classes, r, seed) for r, v in extractors.items()}

    return cached(run_dir / "frozen_scores.json", compute)


def supervised_frozen_scores(run_dir: Path, supervised: dict[float, str], seed: int) -> dict:
    """{fraction: (linear, kNN test acc)} of each supervised ViT's frozen encoder, each fraction
    rated on the labelled subset its classifier was trained on; cached beside the frozen rows."""

    def compute() -> dict:
        cfg, datasets, classes = eval_data(run_dir)
        out = {}
        for fraction, ckpt in supervised.items():
            encoder = load_encoder(cfg.model.encoder, ckpt, "encoder")  # the classifier's
            views = encoder_views(encoder)
            out |= rate_fractions(views, datasets, classes, SUPERVISED_FROZEN, seed, [fraction])
        return out

    return cached(run_dir / "supervised_frozen_scores.json", compute)


def method_scores(dataset: str, row: str, seed: int) -> tuple[dict, float, str]:
    """Another family's row: {fraction: (linear, kNN test acc)} of the encoder pre-trained by
    ``python train.py experiment=<METHODS[row][dataset]>``, its minutes and precision."""
    recipe = METHODS[row][dataset]
    pre = train(f"{dataset}_{recipe}_s{seed}", f"experiment={recipe}", f"seed={seed}")
    run_dir = Path(pre["run"]["run_dir"])

    part = RATED_PART.get(row, "encoder")

    def compute() -> dict:
        cfg, datasets, classes = eval_data(run_dir)
        if part is None:
            torch.manual_seed(seed)  # the random encoder, as eval.py draws it
            encoder = instantiate(cfg.model.encoder).eval()
        else:
            encoder = load_encoder(cfg.model.encoder, pre["checkpoints"]["last"], part)
        return rate_fractions(encoder_views(encoder), datasets, classes, row, seed)

    scores = cached(
        run_dir / ("random_scores.json" if part is None else "frozen_scores.json"), compute
    )
    return scores, pre["run"]["fit_seconds"] / 60, pre["run"]["precision"]


def classifier_overrides(dataset: str, pre_cfg) -> list[str]:
    """The pre-training run's data and ViT shape, for supervised_vit / finetune / linear_probe."""
    enc = pre_cfg.model.encoder
    return [
        f"data={dataset}",
        f"data.image_size={pre_cfg.data.image_size}",
        f"model.net.encoder.patch_size={enc.patch_size}",
        f"model.net.encoder.size={enc.size}",
        f"model.net.encoder.depth={enc.depth}",
        f"model.net.encoder.stem_width={enc.get('stem_width') or 'null'}",
    ]


def trained_scores(dataset: str, seed: int, ckpt: str, shape: list[str], run_dir: Path) -> dict:
    """{row: {fraction: test acc}} for the rows trained by train.py, and under "checkpoints"
    {fraction: the supervised ViT's last.ckpt}."""
    out: dict[str, dict[float, float]] = {row: {} for row in TRAINED_ROWS}
    train_split = eval_data(run_dir)[1]["train"]
    for fraction in FRACTIONS:
        # Batch 32, or the whole labelled set where it is smaller (1 % of digits is 10
        # images): the loaders drop incomplete batches. The subset's size is per class, the
        # same for every seed.
        batch_size = min(32, len(class_balanced_subset(train_split, fraction, seed=0)))
        for row, (experiment, pretrained) in TRAINED_ROWS.items():
            name = (
                f"{dataset}_{experiment}_{'ijepa' if pretrained else 'scratch'}_f{fraction}_s{seed}"
            )
            run = train(
                name,
                f"experiment={experiment}",
                *shape,
                f"model.init_from={ckpt if pretrained else 'null'}",
                f"data.train_fraction={fraction}",
                f"data.seed={seed}",
                f"seed={seed}",
                f"trainer.max_epochs={EPOCHS[fraction]}",
                f"trainer.check_val_every_n_epoch={EVAL_EVERY[fraction]}",
                f"data.batch_size={batch_size}",
            )
            out[row][fraction] = run["metrics"]["test/acc"]
            if experiment == "supervised_vit":
                out.setdefault("checkpoints", {})[fraction] = run["checkpoints"]["last"]
    return out


def fmt(values: list[float]) -> str:
    spread = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {spread:.3f}"


def frozen_lines(row: str, frozen: list[dict]) -> tuple[str, str]:
    """A frozen row's table line (mean ± std over seeds) and its per-seed line."""
    cells = []
    for f in FRACTIONS:
        cells += [fmt([s[row][f][0] for s in frozen]), fmt([s[row][f][1] for s in frozen])]
    per = "; ".join(
        f"{f:.0%}: " + ", ".join(f"{s[row][f][0]:.3f}/{s[row][f][1]:.3f}" for s in frozen)
        for f in FRACTIONS
    )
    return f"| {row} | " + " | ".join(cells) + " |", f"- {row}: {per}"


def table(dataset: str, seeds: list[int], frozen: list[dict], trained: list[dict]) -> list[str]:
    head = "| encoder | " + " | ".join(f"{f:.0%} linear | {f:.0%} kNN" for f in FRACTIONS) + " |"
    lines = [head, "|---" * (1 + 2 * len(FRACTIONS)) + "|"]
    rows = [r for r in (*FROZEN_ROWS, SUPERVISED_FROZEN) if r in frozen[0]]
    per_seed = []
    for row in rows:
        line, per = frozen_lines(row, frozen)
        lines.append(line)
        per_seed.append(per)
    for row in TRAINED_ROWS:
        cells = []
        for f in FRACTIONS:
            cells += [fmt([s[row][f] for s in trained]), "-"]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
        per_seed.append(
            f"- {row}: "
            + "; ".join(
                f"{f:.0%}: " + ", ".join(f"{s[row][f]:.3f}" for s in trained) for f in FRACTIONS
            )
        )
    seed_list = ", ".join(map(str, seeds))
    return [*lines, "", f"Per seed (linear / kNN, or test acc), seeds {seed_list}:", "", *per_seed]


def put_lines(section: list[str], new: list[str], after: str) -> list[str]:
    """``section`` with each line of ``new`` in place of the line that starts like it (up to
    its row name), or else after the line that starts like it with ``after`` as the row."""
    out = list(section)
    for line in new:
        row = max((r for r in METHODS if r in line), key=len)
        key = line[: line.index(row) + len(row)]
        same = [i for i, old in enumerate(out) if old.startswith(key)]
        if same:
            out[same[0]] = line
        else:
            anchor = key.replace(row, after)
            out.insert(next(i for i, old in enumerate(out) if old.startswith(anchor)) + 1, line)
    return out


def methods_only(dataset: str, seeds: list[int], section: list[str], rows: list[str]) -> list[str]:
    """``--methods-only``: METHODS' rows pre-trained and rated, put into the data set's
    section as it stands (after I-JEPA's context encoder), with a line on how they ran."""
    for row in (r for r in rows if dataset in METHODS[r]):
        runs = [method_scores(dataset, row, seed) for seed in seeds]
        frozen = [{row: scores} for scores, _, _ in runs]
        line, per = frozen_lines(row, frozen)
        trained = (
            "its untrained encoder, drawn from each seed; "
            if RATED_PART.get(row, 1) is None
            else ""
        )
        how = (
            f"{row}: `python train.py experiment={METHODS[row][dataset]}`, {trained}pre-training "
            f"{fmt([m for _, m, _ in runs])} min in {runs[0][2]}, seeds "
            f"{', '.join(map(str, seeds))} ({datetime.date.today()}, {os.cpu_count()}-core "
            f"{cpu_model()}; `python research/ijepa_results.py {shlex.join(sys.argv[1:])}`)."
        )
        section = put_lines(section, [line, per], after="I-JEPA context encoder")
        notes = [i for i, old in enumerate(section) if old.startswith(f"{row}: `")]
        if notes:
            section[notes[0]] = how
        else:
            section[2:2] = [how, ""]  # under the heading
    return section


def previous_sections(path: Path) -> dict[str, list[str]]:
    """The file's ``## <dataset>: ...`` sections as they stand, by data set."""
    if not path.exists():
        return {}
    parts = path.read_text().rstrip("\n").split("\n## ")[1:]
    return {part.split(":", 1)[0]: ("## " + part.rstrip("\n")).split("\n") for part in parts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="*", default=list(RECIPES))
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--methods-only",
        action="store_true",
        help="only the other families' rows (METHODS), put into the file as it stands",
    )
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS),
                        help="with --methods-only: which of them")  # fmt: skip
    args = parser.parse_args()
    out = ROOT / "research" / "ijepa_results.md"
    sections = previous_sections(out)
    if args.methods_only:
        if missing := set(args.datasets) - set(sections):
            raise SystemExit(
                f"{out} has no section for {sorted(missing)}: run without --methods-only"
            )
        header = out.read_text().split("\n## ")[0].rstrip("\n").split("\n")
        for dataset in args.datasets:
            sections[dataset] = methods_only(dataset, args.seeds, sections[dataset], args.methods)
        text = [*header, *(line for d in RECIPES if d in sections for line in ["", *sections[d]])]
        out.write_text("\n".join(text) + "\n")
        print("\n".join(text))
        return
    text = [
        "# I-JEPA against its baselines, frozen and trained",
        "",
        f"Written by `python research/ijepa_results.py {shlex.join(sys.argv[1:])}` on "
        f"{datetime.date.today()}: {cpu_model()}, {os.cpu_count()} CPU cores, "
        f"torch {torch.__version__}, no GPU. Test split; mean ± std over seeds "
        f"{', '.join(map(str, args.seeds))}. Frozen rows: the protocol of `eval.py mode=features` "
        "(linear grid chosen on val, DINO kNN k=20). Trained rows: test/acc of train.py "
        f"(supervised_vit / finetune, epochs by label fraction {EPOCHS}). A data set left "
        "out of --datasets keeps its section from the file's previous version, date and all.",
    ]
    for dataset in args.datasets:
        frozen, trained, monitors, minutes = [], [], [], []
        for seed in args.seeds:
            pre = train(
                f"{dataset}_pretrain_s{seed}", f"experiment={RECIPES[dataset]}", f"seed={seed}"
            )
            run_dir = Path(pre["run"]["run_dir"])
            minutes.append(pre["run"]["fit_seconds"] / 60)
            pre_cfg = load_run_config(run_dir / "config.yaml")
            shape = classifier_overrides(dataset, pre_cfg)
            ckpt = pre["checkpoints"]["last"]
            trained.append(trained_scores(dataset, seed, ckpt, shape, run_dir))
            supervised = supervised_frozen_scores(run_dir, trained[-1]["checkpoints"], seed)
            frozen.append({**frozen_scores(run_dir, seed), SUPERVISED_FROZEN: supervised})
            probe = train(
                f"{dataset}_linear_probe_s{seed}",
                "experiment=linear_probe",
                *shape,
                f"model.init_from={ckpt}",
                f"seed={seed}",
            )
            m, chosen = pre["metrics"], pre["chosen"]["features"]
            monitors.append(
                (
                    m["val/probe_acc"],
                    chosen["linear"]["val_acc"],
                    m["features/linear_acc"],
                    m["val/knn_acc"],
                    chosen["knn"]["val_acc"],
                    m["features/knn_acc"],
                    probe["metrics"]["test/acc"],
                )
            )
        sections[dataset] = [
            f"## {dataset}: `python train.py experiment={RECIPES[dataset]}`, "
            f"pre-training {fmt(minutes)} min in {pre_cfg.trainer.precision} "
            f"({datetime.date.today()}, {os.cpu_count()}-core {cpu_model()})",
            "",
            *table(dataset, args.seeds, frozen, trained),
            "",
            "Online monitors against the protocol, same last.ckpt: online val/* on the val split, "
            "the protocol's chosen head on val and on test (features/*; a few hundred images each, so "
            "the two splits alone differ by a few points); experiment=linear_probe is Lightning's "
            "probe, test split:",
            "",
            "| seed | val/probe_acc | protocol linear, val | features/linear_acc | val/knn_acc "
            "| protocol kNN, val | features/knn_acc | linear_probe test/acc |",
            "|---|---|---|---|---|---|---|---|",
            *(
                f"| {s} | " + " | ".join(f"{v:.3f}" for v in row) + " |"
                for s, row in zip(args.seeds, monitors, strict=True)
            ),
        ]
        sections[dataset] = methods_only(dataset, args.seeds, sections[dataset], list(METHODS))
    for dataset in RECIPES:
        text += ["", *sections.get(dataset, [])] if dataset in sections else []
    out.write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
