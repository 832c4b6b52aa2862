"""Does learning suffer from a change that buys speed? experiment=ijepa_mnist under each
variant of one comparison, seeds 0 1 2, side by side on this machine; each run's end-of-run
frozen-feature table (the protocol of ``eval.py mode=features``: linear grid chosen on val,
DINO kNN k=20, test split, 100 % labels). Writes research/<comparison>.md.

    python research/side_by_side.py fixed_shapes               # both variants, seeds 0 1 2
    python research/side_by_side.py bf16_weights --variants fsdp_bf16 --seeds 0

Run dirs are cached under logs/<comparison>/runs/ (ijepa_results.train): a stopped script
continues where it stopped.
"""

import argparse
import datetime
import os
import shlex
import sys
from pathlib import Path

import torch
from ijepa_results import train  # its sibling script: train.py into a cached run dir
from vicreg_recipe_search import fmt  # mean ± std over seeds

from trainlab.utils.machine import cpu_model

ROOT = Path(__file__).resolve().parents[1]
# comparison: (title, {tag: (row name, overrides)}); the first variant is the default's.
COMPARISONS = {
    "fixed_shapes": (
        "Fixed-shape masks against the paper's masks on mnist5k",
        {
            "paper": ("paper masks", ["model.masks.fixed_shapes=null"]),
            "fixed8": ("fixed_shapes=8", ["model.masks.fixed_shapes=8"]),
        },
    ),
    "bf16_weights": (
        "bf16 weights once a step (FSDP2's mixed precision) against bf16 autocast on mnist5k",
        {
            "autocast": ("bf16 autocast (trainer.precision=bf16-mixed)", []),
            "fsdp_bf16": (
                "FSDP2 bf16 weights, float32 master weights and gradient reduction",
                [
                    "strategy=fsdp",
                    "strategy.param_dtype=bfloat16",
                    "strategy.reduce_dtype=float32",
                    "trainer.precision=32-true",
                ],
            ),  # fmt: skip
        },
    ),
}
KEYS = {"linear": "features/linear_acc", "kNN": "features/knn_acc", "RankMe": "val/rankme"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("comparison", choices=list(COMPARISONS))
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument("--variants", nargs="*", default=None, help="tags; default: all")
    args = parser.parse_args()
    title, variants = COMPARISONS[args.comparison]
    chosen = {t: v for t, v in variants.items() if args.variants is None or t in args.variants}
    rows, per_seed = [], []
    # Seeds outer, variants inner: drift on a shared machine hits every variant alike.
    runs = {tag: [] for tag in chosen}
    for seed in args.seeds:
        for tag, (_, overrides) in chosen.items():
            runs[tag].append(
                train(
                    f"{tag}_s{seed}",
                    "experiment=ijepa_mnist",
                    f"seed={seed}",
                    *overrides,
                    "test=false",
                    task=args.comparison,
                )  # fmt: skip
            )
    for tag, done in runs.items():
        name, m = chosen[tag][0], [r["metrics"] for r in done]
        cells = [fmt([x[k] for x in m]) for k in KEYS.values()]
        minutes = fmt([r["run"]["fit_seconds"] / 60 for r in done])
        rows.append(f"| {name} | {' | '.join(cells)} | {minutes} |")
        per_seed.append(
            f"- {name}: " + ", ".join(f"{x[KEYS['linear']]:.3f}/{x[KEYS['kNN']]:.3f}" for x in m)
        )
    commands = "; ".join(
        f"`python train.py experiment=ijepa_mnist seed=<s> {' '.join(chosen[t][1])}`".replace(
            " `", "`"
        )
        for t in chosen
    )
    text = [
        f"# {title}",
        "",
        f"Written by `python research/side_by_side.py {shlex.join(sys.argv[1:])}` on "
        f"{datetime.date.today()}: {cpu_model()}, {os.cpu_count()} CPU cores, torch "
        f"{torch.__version__}, no GPU. {commands}; seeds {args.seeds}, run one after the "
        "other on the same machine; mean ± std over seeds of the run's end-of-run "
        "frozen-feature table (target encoder, test split).",
        "",
        f"| variant | {' | '.join(KEYS)} | minutes |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Per seed (linear/kNN):",
        "",
        *per_seed,
        "",
    ]
    out = ROOT / "research" / f"{args.comparison}.md"
    out.write_text("\n".join(text))
    print(out.read_text())


if __name__ == "__main__":
    main()
