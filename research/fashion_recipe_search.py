"""The search behind the Fashion-MNIST experiments' recipes, on the validation split only.

    python research/fashion_recipe_search.py                       # every variant, seed 0
    python research/fashion_recipe_search.py --only ijepa_epochs_8

Each variant is an experiment of research/fashion_results.py's METHODS with train.py
overrides. Its score is what the table lacks, the kNN of the frozen features beside the raw
pixels', read on the 6,000 validation images that data.seed holds out of train (DINO's kNN,
k=20, the train split as bank, the better of the protocol's views): the test split is never
read, so a recipe chosen here is not chosen on test. The run's online monitors (val probe,
val RankMe) stand beside it. Every run is kept in logs/fashion_results/runs/ under its
variant's name, and every score in logs/fashion_results/search/, so the search can be
stopped and continued. Writes research/fashion_recipe_search.md.
"""

import argparse
import datetime
import json
import os
import shlex
import sys
from pathlib import Path

import torch
from fashion_results import TASK, run_data  # research/: the table's helpers
from ijepa_results import ROOT, train

from trainlab.evaluation.checkpoint import load_encoder
from trainlab.evaluation.features import encoder_views, pixel_views
from trainlab.evaluation.protocol import extract_splits, knn_choice
from trainlab.utils.machine import cpu_model

SCORES = ROOT / "logs" / TASK / "search"


def dino_views(global_crop: tuple, local_crop: tuple) -> str:
    """data.views as a Hydra override: DINO's 2 global and 4 local (14 px) views, with flips."""

    def view(crop: tuple, size: str = "") -> str:
        return f"{{crop_scale:[{crop[0]},{crop[1]}],hflip:0.5{size}}}"

    views = [view(global_crop)] * 2 + [view(local_crop, ",size:14")] * 4
    return f"data.views=[{','.join(views)}]"


FIRST_DINO_VIEWS = dino_views((0.4, 1.0), (0.1, 0.4))
LEJEPA = ["model.sigreg_weight=0.02", "model.optimizer.lr=5e-4"]  # lejepa_first's

# {variant: (experiment, overrides)}: every variant pins what it varies, so that it reads the
# same whatever its experiment's file says now. The comment above each says what it tests.
VARIANTS: dict[str, tuple[str, list[str]]] = {
    # The recipes as the table first ran them, the mnist5k recipes sized to about 10 minutes
    # (seed 0: kNN 4.3 to 9.4 points below the pixels on test). Their runs are the table's.
    "ijepa_first": ("ijepa_fashion", ["trainer.max_epochs=4"]),
    "vicreg_first": ("vicreg_fashion", ["model.optimizer.lr=1e-3"]),
    "dino_first": ("dino_fashion", [FIRST_DINO_VIEWS, "trainer.max_epochs=2"]),
    "mae_first": ("mae_fashion", ["trainer.max_epochs=5"]),
    # On mnist5k, twice the epochs lifted I-JEPA's kNN by 4.2 points (research/
    # ijepa_recipe_search.md, round 25); 8 epochs is about 19 minutes, inside the 20.
    "ijepa_epochs_8": ("ijepa_fashion", ["trainer.max_epochs=8"]),
    # Its features are dimensionally collapsed (online val RankMe 18 of 192); on mnist5k a 3x
    # lower LR kept more rank (research/vicreg_recipe_search.md).
    "vicreg_lr_3e-4": ("vicreg_fashion", ["model.optimizer.lr=3e-4"]),
    # Its online val RankMe read 2.8 (31 centred): the crops dino_mnist was searched with
    # (globals 0.6-1.0, locals 0.2-0.6) in place of 0.4-1.0 and 0.1-0.4, flips kept.
    "dino_crops_0.6": (
        "dino_fashion",
        [dino_views((0.6, 1.0), (0.2, 0.6)), "trainer.max_epochs=2"],
    ),
    # The slow family (167 images a second): 3 epochs in place of 2, about 17 minutes.
    "dino_epochs_3": ("dino_fashion", [FIRST_DINO_VIEWS, "trainer.max_epochs=3"]),
    # Twice the epochs, about 19 minutes.
    "mae_epochs_10": ("mae_fashion", ["trainer.max_epochs=10"]),
    # The ResNet-18 recipes as the table first ran them (their runs are the table's): the
    # ViT's views and schedule, VICReg at the model's peak LR 1e-3, DINO 2 epochs.
    "vicreg_resnet_first": ("vicreg_fashion_resnet", ["model.optimizer.lr=1e-3"]),
    "dino_resnet_first": ("dino_fashion_resnet", ["trainer.max_epochs=2"]),
    # The ViT's lever: 3x lower LR (+1.4 val kNN there); another network, so it is tried,
    # not assumed.
    "vicreg_resnet_lr_3e-4": ("vicreg_fashion_resnet", ["model.optimizer.lr=3e-4"]),
    # LeJEPA as the table first ran it: the paper's loss, stable-pretraining's SIGReg weight
    # 0.02, peak LR 5e-4, 2 epochs (that row read kNN 8.9 to 9.7 below the pixels on test).
    "lejepa_first": ("lejepa_fashion", [*LEJEPA, "trainer.max_epochs=2"]),
    # The lever of I-JEPA and MAE: more epochs, 3 in place of 2 (about 16 minutes).
    "lejepa_epochs_3": ("lejepa_fashion", [*LEJEPA, "trainer.max_epochs=3"]),
    # SIGReg pulls harder toward the isotropic Gaussian: weight 0.05 in place of 0.02.
    "lejepa_sigreg_0.05": (
        "lejepa_fashion",
        ["model.sigreg_weight=0.05", "model.optimizer.lr=5e-4", "trainer.max_epochs=2"],
    ),
    # The top of the paper's range for the weight (about 0.01 to 0.1): 0.1.
    "lejepa_sigreg_0.1": (
        "lejepa_fashion",
        ["model.sigreg_weight=0.1", "model.optimizer.lr=5e-4", "trainer.max_epochs=2"],
    ),
    # Twice the peak LR, 1e-3 (the warm-up is 0.3 epochs).
    "lejepa_lr_1e-3": (
        "lejepa_fashion",
        ["model.sigreg_weight=0.02", "model.optimizer.lr=1e-3", "trainer.max_epochs=2"],
    ),
}


def val_knn(views, run_dir: Path) -> tuple[float, str]:
    """(val accuracy, view) of DINO's kNN on the frozen features of ``run_dir``'s data, the
    train split as bank, the view that reads best on val: no test image is read."""
    _cfg, datasets, classes = run_data(run_dir)
    feats, labels = extract_splits(views, datasets, "search", splits=("train", "val"))
    view, val, _ = knn_choice(feats, labels, classes)
    return val, view


def score(variant: str, seed: int) -> dict:
    """The variant's pre-training (cached run) and its val kNN (cached score)."""
    path = SCORES / f"{variant}_s{seed}.json"
    if not path.exists():
        experiment, overrides = VARIANTS[variant]
        name = f"{variant}_s{seed}"
        args = (f"experiment={experiment}", f"seed={seed}", "features.enabled=false", *overrides)
        run = train(name, *args, task=TASK)
        run_dir = Path(run["run"]["run_dir"])
        encoder_cfg = run_data(run_dir)[0].model.encoder
        encoder = load_encoder(encoder_cfg, run["checkpoints"]["last"], "evaluated")
        knn, view = val_knn(encoder_views(encoder), run_dir)
        pixels, _ = pixel_score(run_dir, seed)
        online = run["metrics"]
        result = {
            "knn_val": knn,
            "view": view,
            "pixels_knn_val": pixels,
            "probe_val": online.get("val/probe_acc"),
            "rankme_val": online.get("val/rankme"),
            "minutes": run["run"]["fit_seconds"] / 60,
            "machine": f"{cpu_model()}, {os.cpu_count()} CPU cores, torch {torch.__version__}",
            "date": str(datetime.date.today()),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result))
    return json.loads(path.read_text())


def pixel_score(run_dir: Path, seed: int) -> tuple[float, str]:
    """The raw pixels' val kNN on the same splits at the variant's image size (cached: one
    number for every variant of that size)."""
    size = run_data(run_dir)[0].data.image_size
    path = SCORES / f"raw_pixels_{size}px_s{seed}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(val_knn(pixel_views, run_dir)))
    return tuple(json.loads(path.read_text()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="*", type=int, default=[0])
    args = parser.parse_args()
    for seed in args.seeds:
        for variant in args.only:
            print(variant, seed, score(variant, seed), flush=True)
    write(args.seeds)


def write(seeds: list[int]) -> None:
    """research/fashion_recipe_search.md from every cached score."""
    lines = ["| variant | overrides | seed | val kNN | - pixels | online val probe | val RankMe | fit min |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    machines: dict[str, list[str]] = {}  # "machine (date)": its variants
    for variant, (experiment, overrides) in VARIANTS.items():
        for seed in seeds:
            path = SCORES / f"{variant}_s{seed}.json"
            if not path.exists():
                continue
            s = json.loads(path.read_text())
            machines.setdefault(f"{s['machine']}, no GPU ({s['date']})", []).append(variant)
            shown = " ".join(f"`{o}`" for o in [f"experiment={experiment}", *overrides])
            lines.append(
                f"| {variant} | {shown} | {seed} | {s['knn_val']:.3f} ({s['view']}) | "
                f"{s['knn_val'] - s['pixels_knn_val']:+.3f} | {s['probe_val']:.3f} | "
                f"{s['rankme_val']:.0f} | {s['minutes']:.1f} |"
            )
    where = "; ".join(f"{m}: {', '.join(v)}" for m, v in machines.items())
    text = [
        "# Fashion-MNIST recipe search (validation split only)",
        "",
        "Written by `python research/fashion_recipe_search.py` "
        f"(last call: `{shlex.join(sys.argv[1:]) or 'no arguments'}`). Where each row ran: {where}. "
        "val kNN: DINO's kNN (k=20) of the frozen features on the 6,000 validation images, the "
        "54,000 training images as bank, the better view on val (in brackets); `- pixels`: "
        "minus the raw pixels' val kNN on the same splits. Online val probe and RankMe: the "
        "run's own monitors at its last validation. The test split is not read.",
        "",
        *lines,
        "",
        READING,
    ]
    (ROOT / "research" / "fashion_recipe_search.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))


# What the table showed, for the file (rewrite it when the variants change).
READING = """\
What it showed (seed 0 only, so read a point or two as noise; the pixels read 0.860 on val):
- **Time is the lever for I-JEPA and MAE.** Twice the epochs, 19.5 and 19.7 minutes (inside
  the issue's 20), lifted the val kNN by 2.0 points for I-JEPA (to 0.841) and 2.3 for MAE (to
  0.837). Both are still below the pixels, by 1.9 and 2.3. ijepa_fashion and mae_fashion now
  run 8 and 10 epochs. I-JEPA's online val kNN (a 4,096-image bank) was still rising at the
  end (0.773 at epoch 4, 0.793 and 0.786 at epochs 6 and 7); MAE's stopped rising after
  epoch 5 (0.728, then 0.714 to 0.729).
- **VICReg: a 3x lower LR**, 3e-4 in place of 1e-3, read 1.4 points higher (0.782), within
  two seeds' noise; vicreg_fashion takes it. It is not the mnist5k story: the val RankMe
  fell (16 against 18) instead of rising. VICReg stays 7.8 below the pixels, the furthest of
  the ViT families with DINO.
- **DINO: neither lever moved it.** dino_mnist's narrower crops read +0.4 and a third epoch
  +0.7 (18.1 minutes), both noise; dino_fashion keeps its recipe, 8.9 below the pixels. Its
  uncentred RankMe of 2 to 3 is a shared offset (centred: 30 to 34 at the last validation),
  as on mnist5k (research/dino_recipe_search.md), not a collapse of the features.
- **Where the bar stands.** A supervised ViT-Tiny/7 of the same shape, trained from scratch
  on all the labels for 8.9 minutes, reads kNN 0.869 on test, 0.7 above the pixels
  (research/fashion_results.md): at 28 px with this encoder and these minutes, beating the
  pixels on kNN is hard even with labels.
- **The ResNet-18s** (32 px, whose pixels read 0.864 on val): DINO's first recipe reads
  0.838, 2.5 below the pixels (only I-JEPA at 8 epochs is closer, 1.9), VICReg's 0.816.
  The ViT's lever for VICReg, a 3x lower LR, read +0.7 (0.823, 12.6 minutes), noise, with
  the online val probe 0.3 lower: vicreg_fashion_resnet keeps the model's 1e-3. A random
  ResNet-18 is already close to both on test (research/fashion_results.md): the
  architecture carries most of those rows.
- **LeJEPA: SIGReg's weight is its lever** (this Xeon, 2026-12-06). The table's first recipe
  (weight 0.02, peak LR 5e-4, 2 epochs) reads 0.771, 8.8 below the pixels, with an online
  val RankMe of 9. The weight rose and so did the val kNN: 0.777 at 0.05, 0.787 at 0.1 (the
  top of the paper's range of about 0.01 to 0.1), RankMe 12 and 13. A third epoch read 0.772
  (time is not the lever here, unlike I-JEPA and MAE) and twice the peak LR 0.757.
  lejepa_fashion now takes the weight 0.1: +1.6 over the first recipe on one seed, about
  the noise of two seeds, and it stays 7.3 below the pixels. A weight above the paper's
  range was not tried.
- Not tried, for lack of time: more than one seed per variant, I-JEPA's mask sizes and
  var_cov weight on Fashion-MNIST, DINO's teacher temperature and ResNet epochs, VICReg's
  expander width, a CLS token for DINO, LeJEPA's crop scales and a lower peak LR."""


if __name__ == "__main__":
    main()
