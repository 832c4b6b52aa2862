"""The measured search behind experiment=ijepa_mnist: pre-train variants on mnist5k, rate each
with the frozen-feature protocol (``trainlab.evaluation``), write results/ijepa_recipe_search.md.

    python scripts/ijepa_recipe_search.py                 # every variant below, seed 0
    python scripts/ijepa_recipe_search.py --only base no_crop

Each variant is a list of train.py overrides on top of BASE. A variant whose run dir already
holds metrics.json is not pre-trained again (delete logs/recipe_search/runs/<name>_s<seed> to redo it),
so the search can be stopped and continued.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "logs" / "recipe_search" / "runs"

# Every run: no test loop, no config print, rated below by eval.py on last.ckpt.
RUN_FLAGS = ["test=false", "extras.print_config=false", "features.enabled=false"]
# The starting point: the old default job's recipe (ijepa_digits) moved to mnist5k at 28 px.
BASE = [
    "experiment=ijepa_digits",
    "data=mnist5k",
    "data.image_size=28",
    "data.crop_scale=[0.3,1.0]",
    "model.masks.num_targets=4",
    "trainer.max_epochs=10",
    *RUN_FLAGS,
]

VARIANTS: dict[str, list[str]] = {
    "base": [],
    "no_crop": ["data.crop_scale=null"],
    "lr_1e-3": ["model.optimizer.lr=1e-3"],
    "pred_deep": ["model.predictor.depth=4", "model.predictor.pred_dim=192"],
    "ema_0.99": ["model.ema=[0.99,1.0]"],
    "small_targets": ["model.masks.target_scale=[0.1,0.15]"],
    "patch_7": ["model.encoder.patch_size=7", "model.masks.num_targets=2"],
    "loss_l2": ["model.loss=l2"],
    "ctx_0.6": ["model.masks.context_scale=[0.6,0.8]"],
    "targets_2": ["model.masks.num_targets=2"],
    "wd_const": ["model.weight_decay=[0.04,0.04]"],
    "epochs_20": ["trainer.max_epochs=20"],
}


# What the first round showed (patch 7 costs a third of patch 4 per step; crops cut the
# centred digits apart; 1e-3 collapses): spend the minutes on steps. Run without BASE.
CHOSEN = "ijepa_mnist"
VARIANTS[CHOSEN] = [f"experiment={CHOSEN}"]


def pretrain(name: str, overrides: list[str], seed: int) -> Path:
    run_dir = RUNS / f"{name}_s{seed}"
    if not (run_dir / "metrics.json").exists():
        cmd = [
            sys.executable,
            "train.py",
            *(RUN_FLAGS if name == CHOSEN else BASE),
            *overrides,
            f"seed={seed}",
            "task_name=recipe_search",
            f"run_name={run_dir.name}",
        ]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return run_dir


def rate(run_dir: Path, baselines: bool) -> dict:
    """eval.py mode=features on the run's last checkpoint; returns its metrics.json."""
    out = ROOT / "logs" / "recipe_search_eval" / "runs" / run_dir.name
    if not (out / "metrics.json").exists():
        cmd = [
            sys.executable,
            "eval.py",
            "mode=features",
            f"ckpt_path={run_dir}/checkpoints/last.ckpt",
            f"features.baselines={str(baselines).lower()}",
            "task_name=recipe_search_eval",
            f"run_name={run_dir.name}",
            "extras.print_config=false",
        ]
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "metrics.json").read_text())


# Runs whose minutes are inflated: they shared the 2 cores with another job (alone, 10
# epochs of base take 4-5 minutes).
SHARED_CPU = {"base", "no_crop"}


def write_table(rows: list[tuple[str, list[str], dict, float]], baseline: dict, path: Path) -> None:
    lines = [
        "# I-JEPA recipe search on mnist5k (seed 0)",
        "",
        "Produced by `python scripts/ijepa_recipe_search.py`. Every variant pre-trains on mnist5k's",
        "4,000 training images at 28 px and is rated by `eval.py mode=features` on its last",
        "checkpoint (target encoder; linear-probe grid chosen on val, DINO kNN k=20; test split,",
        "500 images, so one image is 0.2 points). Overrides are on top of:",
        "",
        "    " + " ".join(BASE),
        "",
        f"except the last row, `{CHOSEN}`: `python train.py experiment={CHOSEN}` as committed",
        "(patch 7 on a 4x4 grid, 2 targets, no crops, peak LR 3e-4, 35 epochs), the recipe the",
        "first rows led to (its minutes predate a data-loading fix that made them 7.5, see",
        "results/ijepa_results.md).",
        "",
        f"Baselines on the same splits: raw pixels linear {baseline['baseline/pixels_linear_acc']:.3f}, "
        f"kNN {baseline['baseline/pixels_knn_acc']:.3f}; random encoder (base shape) linear "
        f"{baseline['baseline/random_linear_acc']:.3f}, kNN {baseline['baseline/random_knn_acc']:.3f}.",
        "",
        "| variant | overrides | linear | kNN | random encoder of its shape: linear / kNN "
        "| chosen head | pre-training min |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, overrides, m, minutes in rows:
        head = m["chosen"]["features"]["linear"]
        own = m["metrics"] if "baseline/random_linear_acc" in m["metrics"] else baseline
        lines.append(
            f"| {name} | `{' '.join(overrides) or '-'}` | {m['metrics']['features/linear_acc']:.3f} "
            f"| {m['metrics']['features/knn_acc']:.3f} | {own['baseline/random_linear_acc']:.3f} / "
            f"{own['baseline/random_knn_acc']:.3f} | {head['view']} "
            f"wd={head['weight_decay']:g} | {minutes:.1f}{' *' if name in SHARED_CPU else ''} |"
        )
    lines += [
        "",
        "\\* shared the 2 cores with another job: its minutes are inflated (alone, 10 epochs of",
        "base take 4-5 minutes).",
        "",
        f"Machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPU cores, torch {torch.__version__}, fp32.",
        "",
    ]
    path.write_text("\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=list(VARIANTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pretrain-only", action="store_true")
    args = parser.parse_args()
    rows = []
    for name in args.only:
        run_dir = pretrain(name, VARIANTS[name], args.seed)
        if args.pretrain_only:
            continue
        # The random baseline depends on the encoder's shape: rated again where it changes.
        new_shape = name == CHOSEN or any(o.startswith("model.encoder.") for o in VARIANTS[name])
        metrics = rate(run_dir, baselines=name == "base" or new_shape)
        minutes = json.loads((run_dir / "metrics.json").read_text())["run"]["fit_seconds"] / 60
        rows.append((name, VARIANTS[name], metrics, minutes))
    if rows:
        baseline = rate(RUNS / f"base_s{args.seed}", baselines=True)["metrics"]
        write_table(rows, baseline, ROOT / "results" / "ijepa_recipe_search.md")


if __name__ == "__main__":
    main()
