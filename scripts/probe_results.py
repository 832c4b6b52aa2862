"""Linear-probe accuracy of a pre-trained encoder against a random encoder of the same shape.

    python scripts/probe_results.py                      # experiment=ijepa_digits, seeds 0 1 2
    python scripts/probe_results.py --seeds 0 --overrides trainer.max_epochs=5

For each seed: pre-train with train.py's own code, then fit a logistic-regression probe
(scikit-learn) on frozen, average-pooled target-encoder features of the train split and
score it on the test split; the same probe on a randomly initialised encoder of the same
shape is the baseline. Writes a markdown table to results/probe_<experiment>.md.
"""

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import hydra
import torch
from hydra import compose, initialize_config_dir
from omegaconf import open_dict
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from trainlab.train import CONFIGS, train

ROOT = Path(__file__).resolve().parents[1]


@torch.no_grad()
def features(encoder, dataset, batch_size=256):
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size)
    xs, ys = zip(*((encoder.eval().pooled(x), y) for x, y in loader), strict=True)
    return torch.cat(xs).numpy(), torch.cat(ys).numpy()


def probe_accuracy(encoder, datamodule) -> float:
    datamodule.setup()
    train_set = datamodule.train_set
    train_set.transform = datamodule.transform(train=False)  # no augmentation for the probe
    x_train, y_train = features(encoder, train_set)
    x_test, y_test = features(encoder, datamodule.test_set)
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000))
    return float(probe.fit(x_train, y_train).score(x_test, y_test))


def run(experiment: str, seed: int, overrides: list[str], out: Path) -> dict:
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    with initialize_config_dir(CONFIGS, version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                f"experiment={experiment}",
                f"seed={seed}",
                "extras.print_config=false",
                *overrides,
            ],
            return_hydra_config=True,
        )
    run_dir = out / f"{experiment}_seed{seed}_{time.strftime('%Y%m%d-%H%M%S')}"
    with open_dict(cfg):
        cfg.paths.output_dir = cfg.hydra.runtime.output_dir = str(run_dir)
    HydraConfig().set_config(cfg)
    with open_dict(cfg):
        del cfg.hydra
    start = time.monotonic()
    train(cfg)
    minutes = (time.monotonic() - start) / 60
    results = json.loads((run_dir / "metrics.json").read_text())
    ckpt = results["checkpoints"]["last"]
    model = hydra.utils.instantiate(cfg.model)
    model.load_state_dict(torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"])
    trained = probe_accuracy(model.target_encoder, hydra.utils.instantiate(cfg.data))
    context = probe_accuracy(model.encoder, hydra.utils.instantiate(cfg.data))
    torch.manual_seed(seed)
    random_encoder = hydra.utils.instantiate(cfg.model.encoder)
    baseline = probe_accuracy(random_encoder, hydra.utils.instantiate(cfg.data))
    return {
        "seed": seed,
        "trained": trained,
        "context": context,
        "random": baseline,
        "minutes": minutes,
        "online_probe": results["metrics"].get("test/probe_acc"),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="ijepa_digits")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--overrides", nargs="*", default=[])
    parser.add_argument("--out", type=Path, default=ROOT / "logs" / "probe_results")
    args = parser.parse_args()
    rows = [run(args.experiment, s, args.overrides, args.out) for s in args.seeds]
    mean = lambda key: statistics.mean(r[key] for r in rows)  # noqa: E731
    lines = [
        f"# Linear probe: `{args.experiment}` vs a random encoder",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}, CPU. Overrides: `{' '.join(args.overrides) or 'none'}`.",
        "Probe: logistic regression on standardised, average-pooled target-encoder features "
        "(train split, no augmentation), accuracy on the test split.",
        "",
        "| seed | pre-trained target encoder | its context encoder | random encoder "
        "| online probe (test) | pre-training minutes |",
        "|---|---|---|---|---|---|",
        *(
            f"| {r['seed']} | {r['trained']:.4f} | {r['context']:.4f} | {r['random']:.4f} | "
            f"{r['online_probe'] if r['online_probe'] is None else round(r['online_probe'], 4)} | "
            f"{r['minutes']:.1f} |"
            for r in rows
        ),
        f"| mean | {mean('trained'):.4f} | {mean('context'):.4f} | {mean('random'):.4f} | "
        f"| {mean('minutes'):.1f} |",
        "",
    ]
    path = ROOT / "results" / f"probe_{args.experiment}.md"
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
