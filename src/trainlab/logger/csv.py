"""Lightning's CSVLogger, except that a resumed run appends to metrics.csv, and every
row is written at once.

Lightning's writer deletes an existing metrics.csv when it starts, so resuming a run
in its own run dir (resume=true) would throw away every metric logged before the stop.
It also keeps rows in memory for 100 steps by default: after a SIGKILL the rows between
the last flush and the checkpoint the run resumes from would be lost for good. Rows
after that checkpoint are logged again by the resumed run, so a resume first drops them
(``truncate_from``, called by train.py): each step appears once.
"""

import csv
import os
from pathlib import Path

from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from trainlab.utils.lightning_internals import CSVLoggerHooks, ExperimentWriterHooks
from trainlab.utils.ranges import Count


class AppendingExperimentWriter(ExperimentWriterHooks):
    def check_log_dir_exists(self) -> None:
        if os.path.isfile(self.metrics_file_path):  # keep it, and its columns
            with open(self.metrics_file_path, newline="") as f:
                self.metrics_keys = next(csv.reader(f), [])


class ResumableCSVLogger(CSVLoggerHooks):
    def __init__(self, *args, flush_logs_every_n_steps: Count = 1, **kwargs):
        super().__init__(*args, flush_logs_every_n_steps=flush_logs_every_n_steps, **kwargs)

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self.writer is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self.writer = AppendingExperimentWriter(log_dir=self.log_dir)
        return self.writer

    def truncate_from(self, step: int) -> None:
        """Keep only the rows logged before optimizer step ``step`` (a checkpoint's
        global_step: rows of steps 0 .. step - 1 describe the state it holds)."""
        path = Path(self.log_dir) / ExperimentWriter.NAME_METRICS_FILE
        if not path.is_file():
            return
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            keys, rows = reader.fieldnames or [], [r for r in reader if int(r["step"]) < step]
        tmp = path.with_suffix(".tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, path)
