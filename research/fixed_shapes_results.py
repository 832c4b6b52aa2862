"""Does learning suffer from fixed-shape masks? experiment=ijepa_mnist with the paper's masks
(model.masks.fixed_shapes=null) beside fixed_shapes=8, seeds 0 1 2, side by side on this
machine; each run's end-of-run frozen-feature table (the protocol of ``eval.py
mode=features``: linear grid chosen on val, DINO kNN k=20, test split, 100 % labels).
Writes research/fixed_shapes.md.

    python research/fixed_shapes_results.py                 # both variants, seeds 0 1 2
    python research/fixed_shapes_results.py --seeds 0

Run dirs are cached under logs/fixed_shapes/runs/ (ijepa_results.train): a stopped script
continues where it stopped.
"""

import argparse
import datetime
import os
import sys
from pathlib import Path

import torch
from ijepa_results import train  # its sibling script: train.py into a cached run dir
from vicreg_recipe_search import fmt  # mean ± std over seeds

from trainlab.utils.machine import cpu_model

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"paper masks": "null", "fixed_shapes=8": "8"}
KEYS = {"linear": "features/linear_acc", "kNN": "features/knn_acc", "RankMe": "val/rankme"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    args = parser.parse_args()
    rows, per_seed = [], []
    # Seeds outer, variants inner: drift on a shared machine hits both variants alike.
    runs = {name: [] for name in VARIANTS}
    for seed in args.seeds:
        for name, value in VARIANTS.items():
            tag = "fixed8" if value != "null" else "paper"
            runs[name].append(
                train(
                    f"{tag}_s{seed}",
                    "experiment=ijepa_mnist",
                    f"seed={seed}",
                    f"model.masks.fixed_shapes={value}",
                    "test=false",
                    task="fixed_shapes",
                )  # fmt: skip
            )
    for name, done in runs.items():
        m = [r["metrics"] for r in done]
        cells = [fmt([x[k] for x in m]) for k in KEYS.values()]
        minutes = fmt([r["run"]["fit_seconds"] / 60 for r in done])
        rows.append(f"| {name} | {' | '.join(cells)} | {minutes} |")
        per_seed.append(
            f"- {name}: " + ", ".join(f"{x[KEYS['linear']]:.3f}/{x[KEYS['kNN']]:.3f}" for x in m)
        )
    text = [
        "# Fixed-shape masks against the paper's masks on mnist5k",
        "",
        f"Written by `python research/fixed_shapes_results.py {' '.join(sys.argv[1:])}` on "
        f"{datetime.date.today()}: {cpu_model()}, {os.cpu_count()} CPU cores, torch "
        f"{torch.__version__}, no GPU. `python train.py experiment=ijepa_mnist seed=<s> "
        f"model.masks.fixed_shapes=<v>`, seeds {args.seeds}, run one after the other on the "
        "same machine; mean ± std over seeds of the run's end-of-run frozen-feature table "
        "(target encoder, test split).",
        "",
        f"| masks | {' | '.join(KEYS)} | minutes |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Per seed (linear/kNN):",
        "",
        *per_seed,
        "",
    ]
    out = ROOT / "research" / "fixed_shapes.md"
    out.write_text("\n".join(text))
    print(out.read_text())


if __name__ == "__main__":
    main()
