"""Progress display: Lightning's rich bar on a terminal, plain lines with ETA elsewhere.

A redrawn bar turns into thousands of carriage returns in CI and SLURM log files, and
Lightning has no line-based bar, so ``LineProgressBar`` is written here.

The training loss is logged without ``prog_bar``: Lightning copies every such on-step value
to the host after every batch (``convert_tensors_to_scalars``), a host sync per step on a
GPU. Both bars read it from ``trainer.callback_metrics`` (device tensors) at the logging
steps only (``TrainLoss``); the rich bar reads its other metrics there too.
"""

import sys
import time

from lightning.pytorch.callbacks import ProgressBar

from trainlab.utils.lightning_internals import RichProgressBarHooks
from trainlab.utils.ranges import Count, NonNegativeInt


def _duration(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


TRAIN_LOSS = "train/loss_step"


def logged_this_step(trainer) -> bool:
    """At a training batch's end: whether Lightning writes this step's logged values (it
    reads them to the host then). The optimizer step has already counted it."""
    every = trainer.log_every_n_steps
    return bool(every) and trainer.global_step % every == 0


class TrainLoss:
    """The latest training loss for a bar: ``update`` at every batch's end reads it from the
    device at the logging steps only, when Lightning reads its logged values anyway."""

    def __init__(self):
        self.value = None

    def update(self, trainer) -> None:
        loss = trainer.callback_metrics.get(TRAIN_LOSS)
        if loss is not None and logged_this_step(trainer):
            self.value = float(loss)

    def __call__(self, metrics: dict) -> dict:
        return metrics if self.value is None else {**metrics, TRAIN_LOSS: self.value}


class LineProgressBar(ProgressBar):
    """Prints ``epoch e/E | step s/S | metrics | elapsed | ETA`` a few times per epoch."""

    def __init__(self, lines_per_epoch: Count = 4):
        super().__init__()
        self.lines_per_epoch = lines_per_epoch
        self._enabled = True
        self._start = 0.0
        self.train_loss = TrainLoss()

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer, pl_module):
        self._start = time.monotonic()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.train_loss.update(trainer)
        total = self.total_train_batches
        every = max(1, int(total) // self.lines_per_epoch) if total != float("inf") else 50
        if self._enabled and ((batch_idx + 1) % every == 0 or batch_idx + 1 == total):
            self._print_line(trainer, pl_module, batch_idx + 1, total)

    def _print_line(self, trainer, pl_module, done, total):
        elapsed = time.monotonic() - self._start
        max_epochs = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
        line = [f"epoch {trainer.current_epoch + 1}/{max_epochs or '?'}", f"batch {done}/{total}"]
        metrics = self.train_loss(self.get_metrics(trainer, pl_module))
        metrics.pop("v_num", None)
        line += [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()]
        line.append(f"elapsed {_duration(elapsed)}")
        # The share of the run done, by whichever limit ends it first: epochs or max_steps.
        fractions = []
        if max_epochs and total not in (0, float("inf")):
            fractions.append((trainer.current_epoch + done / total) / max_epochs)
        if trainer.max_steps and trainer.max_steps > 0:
            line.insert(2, f"step {trainer.global_step}/{trainer.max_steps}")
            fractions.append(trainer.global_step / trainer.max_steps)
        if fractions and max(fractions) > 0:
            line.append(f"ETA {_duration(elapsed / max(fractions) - elapsed)}")
        print(" | ".join(line), flush=True)


class RichBar(RichProgressBarHooks):
    """Lightning's rich bar, whose metrics (and training loss) are read at the logging steps
    only: Lightning's reads them after every batch."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.train_loss = TrainLoss()

    def update_metrics(self, trainer, pl_module) -> None:
        if trainer.training:
            self.train_loss.update(trainer)
            if not logged_this_step(trainer):
                return
        super().update_metrics(trainer, pl_module)

    def get_metrics(self, trainer, pl_module) -> dict:
        return self.train_loss(super().get_metrics(trainer, pl_module))


def progress_bar(refresh_rate: NonNegativeInt = 1, lines_per_epoch: Count = 4) -> ProgressBar:
    """The rich bar on an interactive terminal, plain lines otherwise (CI, SLURM, pipes)."""
    if sys.stdout.isatty():
        return RichBar(refresh_rate=refresh_rate)
    return LineProgressBar(lines_per_epoch=lines_per_epoch)
