"""The curves part: pictures/curves.png, each metric of a run's metrics.csv against the
optimizer step (callbacks/curves.py)."""

import pytest
from conftest import compose_cfg
from PIL import Image

from trainlab.callbacks.curves import curves
from trainlab.training import train

RUN = [
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=2",
    "trainer.log_every_n_steps=2",
    "features.enabled=false",
]


def test_a_run_keeps_a_picture_of_every_metric_it_logged(tmp_path):
    train(compose_cfg(tmp_path, RUN))
    run = tmp_path / "run"
    found = curves(next(run.rglob("metrics.csv")))
    assert found["train/loss"][0] == [3, 7]  # each epoch's mean, at its last step
    assert found["val/probe_acc"][0] == [3, 7]
    assert found["train/lr"][0] == [1, 3, 5, 7]  # logged every 2 steps
    assert not [k for k in found if k.endswith("_step") or k.startswith(("lr-", "test/"))]
    with Image.open(run / "pictures" / "curves.png") as picture:
        width, height = picture.size
    rows = -(-len(found) // 4)
    assert width == 4 * 360 and height == rows * 240  # a panel per metric, 4 to a row


@pytest.mark.parametrize(
    "overrides",
    [["logger=tensorboard"], ["trainer.max_epochs=1"]],
    ids=["without the CSV logger", "fewer than 3 points a metric"],
)
def test_nothing_is_drawn(tmp_path, overrides):
    train(compose_cfg(tmp_path, [*RUN, *overrides]))
    assert not (tmp_path / "run" / "pictures").exists()
