"""A picture of the run's curves, ``pictures/curves.png``: each metric of the CSV logger's
metrics.csv in a panel of its own against the optimizer step, drawn on rank 0 when the fit
ends. A resumed run continues its metrics.csv, so the picture holds every step of the run.
Not drawn without the CSV logger (``logger=tensorboard`` and ``logger=wandb`` show their own),
nor for a run too short to have a curve.
A part (docs/parts/curves.md), reached by configs/callbacks/curves/default.yaml only."""

import csv
from pathlib import Path

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger

from trainlab.utils.logging import get_logger
from trainlab.utils.ranges import Count

log = get_logger(__name__)

#: A run whose every metric has fewer points (a smoke test, debug=fdr) has no curve to show.
MIN_POINTS = 3


def drawn(key: str) -> bool:
    """Whether a column of metrics.csv gets a panel: not ``epoch`` and ``step`` (where a row
    was logged), the per-step loss (``train/loss`` is its epoch's mean), LearningRateMonitor's
    ``lr-*`` (``train/lr`` where the method schedules it), nor the test metrics (one value
    each, in the run summary)."""
    return (
        key not in ("epoch", "step")
        and not key.endswith("_step")
        and not key.startswith(("lr-", "test/"))
    )


def curves(path: Path) -> dict[str, tuple[list[int], list[float]]]:
    """{metric: (steps, values)} of a metrics.csv, each metric where it was logged."""
    found: dict[str, tuple[list[int], list[float]]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if value and drawn(key):
                    steps, values = found.setdefault(key, ([], []))
                    steps.append(int(row["step"]))
                    values.append(float(value))
    return found


def draw(found: dict[str, tuple[list[int], list[float]]], path: Path, columns: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = -(-len(found) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 2.4 * rows), squeeze=False)
    for ax, (key, (steps, values)) in zip(axes.flat, sorted(found.items()), strict=False):
        ax.plot(steps, values, marker="." if len(steps) < 50 else None)
        ax.set_title(key, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.locator_params(nbins=4)  # fewer ticks: drawn in a third of the time
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(found) :]:
        ax.axis("off")
    fig.supxlabel("optimizer step", fontsize=9)
    # Fixed margins: tight_layout would measure every label first, a second more a run.
    fig.subplots_adjust(
        left=0.05,
        right=0.98,
        bottom=0.5 / (2.4 * rows),
        top=1 - 0.3 / (2.4 * rows),
        wspace=0.3,
        hspace=0.5,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


class Curves(Callback):
    def __init__(self, filename: str = "pictures/curves.png", columns: Count = 4):
        self.filename, self.columns = filename, columns

    def on_fit_end(self, trainer, pl_module) -> None:
        logger = next((lg for lg in trainer.loggers if isinstance(lg, CSVLogger)), None)
        if not trainer.is_global_zero or logger is None:
            return
        logger.save()
        source = Path(logger.experiment.metrics_file_path)
        found = curves(source) if source.is_file() else {}
        if any(len(steps) >= MIN_POINTS for steps, _ in found.values()):
            path = Path(trainer.default_root_dir) / self.filename
            draw(found, path, self.columns)
            log.info(f"curves of {len(found)} metrics: {path}")
