"""At the end of a multirun: a table of its jobs and a plot of the metric against the swept values.

Hydra calls ``on_multirun_end`` once, in the launching process, after every job finished;
each job's results are read back from its ``metrics.json`` and ``overrides.yaml``.
"""

import csv
import json
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from trainlab.run.run_yaml import read_run_yaml
from trainlab.utils.console import print_jobs

# Overrides that name or place a run rather than describe it: never a column.
# callbacks.trial: a sweeper's own callback for each trial (the Optuna part's pruning).
NAMING = ("task_name", "run_name", "resume", "extras.print_config", "callbacks.trial")


def read_overrides(run_dir: Path) -> dict[str, str]:
    """{key: value} of the run's command-line overrides (``overrides.yaml``), keys without
    their ``+``/``~`` prefix, the NAMING ones left out."""
    path = run_dir / "overrides.yaml"
    return read_pairs(list(read_run_yaml(path)) if path.exists() else [])


def read_pairs(overrides: list[str]) -> dict[str, str]:
    """A bool in one spelling: Hydra writes a sweep job's as Python does (``False``), a
    command line keeps what was typed; its grammar reads true and false in any case."""
    pairs = (o.split("=", 1) for o in overrides if "=" in o)
    return {
        k.lstrip("+~"): v.lower() if v.lower() in ("true", "false") else v
        for k, v in pairs
        if k.lstrip("+~") not in NAMING
    }


def not_finished_jobs(sweep_dir: Path) -> list[dict]:
    """The jobs a ``keep_going`` sweep refused or saw fail (hydra_plugins/trainlab_checked)."""
    path = sweep_dir / "not_finished.json"
    entries = json.loads(path.read_text()) if path.is_file() else []
    return [
        {
            "job": e["job"],
            "overrides": read_pairs(e["overrides"]),
            "status": f"{e['status']}: {e['reason']}",
            "metric": None,
            "run_dir": str(sweep_dir / e["job"]) if e["job"] != "-" else "",
        }
        for e in entries
    ]


def collect_jobs(sweep_dir: Path) -> list[dict]:
    jobs = []
    for metrics_file in sorted(sweep_dir.glob("*/metrics.json"), key=lambda p: p.parent.name):
        job_dir = metrics_file.parent
        results = json.loads(metrics_file.read_text())
        jobs.append(
            {
                "job": job_dir.name,
                "overrides": read_overrides(job_dir),
                "status": "pruned" if "pruned" in results else "finished",
                "metric": (results.get("optimized_metric") or {}).get("value"),
                "run_dir": str(job_dir),
            }
        )
    return jobs


def swept_keys(jobs: list[dict]) -> list[str]:
    """The override keys whose value differs between jobs (all keys when none does)."""
    keys = sorted({k for job in jobs for k in job["overrides"]})
    return [k for k in keys if len({job["overrides"].get(k) for job in jobs}) > 1] or keys


def plot_jobs(jobs: list[dict], metric_name: str, path: Path) -> None:
    """One panel per swept key: the metric against that key's values."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    swept = swept_keys(jobs)
    fig, axes = plt.subplots(
        1, max(1, len(swept)), figsize=(4 * max(1, len(swept)), 3.2), squeeze=False
    )
    for ax, key in zip(axes[0], swept, strict=False):
        points = [
            (job["overrides"].get(key), job["metric"]) for job in jobs if job["metric"] is not None
        ]
        try:
            points = sorted((float(x), y) for x, y in points)
        except (TypeError, ValueError):  # categorical values: keep them as labels
            points = sorted((str(x), y) for x, y in points)
        ax.plot([p[0] for p in points], [p[1] for p in points], "o-")
        ax.set_xlabel(key)
        ax.set_ylabel(metric_name)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


class SweepSummary(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        jobs = collect_jobs(sweep_dir)
        jobs += [
            j for j in not_finished_jobs(sweep_dir) if j["job"] not in {k["job"] for k in jobs}
        ]
        if not jobs:
            return
        metric_name = config.get("optimized_metric") or "metric"
        keys = swept_keys(jobs)  # overrides shared by every job are noise in the table
        header = ["job", *keys, metric_name, "status", "run dir"]
        rows = [
            [
                j["job"],
                *(j["overrides"].get(k, "") for k in keys),
                j["metric"],
                j["status"],
                j["run_dir"],
            ]
            for j in jobs
        ]
        with open(sweep_dir / "summary.csv", "w", newline="") as f:
            csv.writer(f).writerows([header, *rows])
        plot_jobs(jobs, metric_name, sweep_dir / "summary.png")
        print_jobs(f"multirun summary ({sweep_dir})", header, rows)
        print(f"table: {sweep_dir / 'summary.csv'}  plot: {sweep_dir / 'summary.png'}")
