"""VAE results for the README: the default runs of vae_digits (and vae_cifar10 where its
data is present), each through train.py as a user would run it.

    python research/vae_results.py                       # writes research/vae.md
    python research/vae_results.py --overrides trainer.max_epochs=5

Reads each run's metrics.json: test/nll (importance-weighted, k = the experiment's
test_importance_samples), test/elbo, test/kl, and test/bpd for 8-bit likelihoods.
"""

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ["vae_digits", "vae_cifar10"]


def run(experiment: str, overrides: list[str], log_dir: Path) -> dict | str:
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        f"experiment={experiment}",
        *overrides,
        f"paths.log_dir={log_dir}",
        f"run_name={experiment}",
        "extras.print_config=false",
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if result.returncode:
        return result.stderr.strip().splitlines()[-1]  # e.g. the missing-data line
    results = json.loads((log_dir / "train" / "runs" / experiment / "metrics.json").read_text())
    return {**results["metrics"], "minutes": results["run"]["wall_seconds"] / 60}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overrides", nargs="*", default=[])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for experiment in EXPERIMENTS:
            result = run(experiment, args.overrides, Path(tmp))
            print(experiment, result, flush=True)
            if isinstance(result, str):
                rows.append(f"| `{experiment}` | not run here: {result} | | | | |")
                continue
            bpd = f"{result['test/bpd']:.3f}" if "test/bpd" in result else "-"
            rows.append(
                f"| `{experiment}` | {result['test/nll']:.2f} | {-result['test/elbo']:.2f} | "
                f"{result['test/kl']:.2f} | {bpd} | {result['minutes']:.1f} |"
            )
    text = f"""# VAE results

Written by `python research/vae_results.py {" ".join(args.overrides)}` on {datetime.date.today()}
({platform.processor() or platform.machine()}, torch {torch.__version__}, no GPU).
Test split, nats per image; NLL is the importance-weighted estimate (k from the
experiment's `model.test_importance_samples`), -ELBO the bound it improves on.

| experiment | test NLL (nats) | test -ELBO | test KL | bits/dim | minutes |
|---|---|---|---|---|---|
{chr(10).join(rows)}
"""
    out = ROOT / "research" / "vae.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
