"""The progress part: Lightning's rich bar on a terminal, plain lines with ETA elsewhere, and the
training loss read from the device at the logging steps only."""

from types import SimpleNamespace

import torch

from trainlab.callbacks.progress import LineProgressBar, RichBar, TrainLoss, progress_bar


def test_the_progress_line_ends_at_max_steps_when_they_stop_the_run_first(capsys):
    """With max_steps before max_epochs, the plain progress line counts steps and its ETA
    reaches 0 at the last step, instead of promising the remaining 299 epochs."""
    import lightning as L
    from lightning.pytorch.demos.boring_classes import BoringModel

    trainer = L.Trainer(
        max_epochs=300,
        max_steps=4,
        limit_val_batches=0,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[LineProgressBar(lines_per_epoch=64)],  # a line after every batch
    )
    trainer.fit(BoringModel())
    last = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch")][-1]
    assert last.startswith("epoch 1/300 | batch 4/") and "| step 4/4 |" in last
    assert last.endswith("ETA 0m00s"), last


def test_the_loss_is_read_to_the_host_at_the_logging_steps_only():
    """Between logging steps the bar keeps the last value read: no host sync per step."""
    loss = TrainLoss()
    trainer = SimpleNamespace(
        log_every_n_steps=5, global_step=3, callback_metrics={"train/loss_step": torch.tensor(2.0)}
    )
    loss.update(trainer)
    assert loss.value is None and loss({"a": 1}) == {"a": 1}
    trainer.global_step = 5
    loss.update(trainer)
    assert loss({"a": 1}) == {"a": 1, "train/loss_step": 2.0}
    trainer.global_step, trainer.callback_metrics["train/loss_step"] = 6, torch.tensor(9.0)
    loss.update(trainer)
    assert loss.value == 2.0


def test_a_terminal_gets_the_rich_bar_and_a_pipe_gets_lines(monkeypatch):
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert isinstance(progress_bar(), RichBar)
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    bar = progress_bar(lines_per_epoch=7)
    assert isinstance(bar, LineProgressBar) and bar.lines_per_epoch == 7
