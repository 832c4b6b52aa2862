"""The non-finite part: a NaN or inf loss stops the run with one line and keeps the last good
checkpoint, or (``callbacks.non_finite.action=skip``) its step is skipped and counted."""

import pytest
import torch
from conftest import logged_series, train_in_process

from trainlab.callbacks.non_finite import all_finite
from trainlab.losses.vicreg import VICRegLoss
from trainlab.model.vicreg import VICReg


def poison_covariance_at(monkeypatch, steps):
    """VICReg's covariance term, and so its loss, becomes NaN at the given optimizer steps."""
    real_loss, real_forward = VICReg.loss, VICRegLoss.forward

    def loss(self, views, generator):
        self.criterion.poisoned = self.training and self.global_step in steps
        return real_loss(self, views, generator)

    def forward(self, z1, z2):
        loss, terms = real_forward(self, z1, z2)
        if getattr(self, "poisoned", False):
            nan = float("nan")
            return loss * nan, {**terms, "covariance": terms["covariance"] * nan}
        return loss, terms

    monkeypatch.setattr(VICReg, "loss", loss)
    monkeypatch.setattr(VICRegLoss, "forward", forward)


NAN_RUN = [
    "experiment=vicreg_digits",
    "trainer.max_epochs=3",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=1",
    "data.batch_size=32",
    "features.enabled=false",
    "trainer.log_every_n_steps=1",
    "extras.print_config=false",
]


@pytest.mark.parametrize("log_every", [1, 50])
def test_non_finite_loss_stops_with_one_line_and_keeps_the_last_checkpoint(
    tmp_path, monkeypatch, capfd, log_every
):
    """The guard reads its flag at the logging interval or before a checkpoint is written
    (here at epoch 1's end, log_every=50): it names the first bad step either way, and no
    checkpoint holds weights from after it."""
    poison_covariance_at(monkeypatch, range(3, 100))
    argv = [*NAN_RUN, "run_name=nan", f"trainer.log_every_n_steps={log_every}"]
    assert train_in_process(monkeypatch, tmp_path, *argv) == 1
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "non-finite loss at step 3" in lines[0], lines
    if log_every == 1:  # the culprit first; at 50 no train/ value was logged yet
        assert lines[0].index("train/covariance=nan") < lines[0].index("train/invariance=")
    checkpoints = tmp_path / "train" / "runs" / "nan" / "checkpoints"
    assert [p.name for p in checkpoints.iterdir() if "on_exception" in p.name] == []
    state = torch.load(checkpoints / "last.ckpt", weights_only=True)
    assert state["global_step"] == 3  # last.ckpt after epoch 0, before the bad step
    assert all(torch.isfinite(t).all() for t in state["state_dict"].values())


def test_non_finite_steps_can_be_skipped_and_are_counted(tmp_path, monkeypatch):
    """Step 4's loss is NaN: skipped, counted, and the weights and optimizer state after it
    (step000005.ckpt) are those before it (step000004.ckpt), tensor for tensor; only the
    online monitors' bank records the step's (finite) features."""
    poison_covariance_at(monkeypatch, {4})
    argv = [
        *NAN_RUN,
        "run_name=skip",
        "callbacks=[default,step_checkpoints]",
        "callbacks.step_checkpoints.every_n_train_steps=1",
        "callbacks.step_checkpoints.save_top_k=-1",
        "callbacks.non_finite.action=skip",
    ]
    assert train_in_process(monkeypatch, tmp_path, *argv) == 0
    run_dir = tmp_path / "train" / "runs" / "skip"
    skipped = logged_series(run_dir, "train/skipped_steps")  # one value per step
    assert skipped == [0.0] * 4 + [1.0] * 5
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["global_step"] == 9  # the skipped step still counts as a step
    assert all(torch.isfinite(t).all() for t in state["state_dict"].values())
    before, after = (
        torch.load(run_dir / "checkpoints" / f"step00000{n}.ckpt", weights_only=True)
        for n in (4, 5)
    )
    assert before["state_dict"].keys() == after["state_dict"].keys()
    for name, tensor in before["state_dict"].items():
        if not name.startswith("online.bank"):  # the monitors' record of the batch's features
            assert torch.equal(tensor, after["state_dict"][name]), name
    (opt_before,), (opt_after,) = before["optimizer_states"], after["optimizer_states"]
    assert opt_before["state"].keys() == opt_after["state"].keys() and opt_before["state"]
    for key, slots in opt_before["state"].items():
        for slot, value in slots.items():
            assert torch.equal(
                torch.as_tensor(value), torch.as_tensor(opt_after["state"][key][slot])
            )


def test_the_finiteness_check_is_exact_where_its_fast_norm_overflows():
    """NaN and inf anywhere are caught; huge finite gradients, whose 2-norm overflows to inf
    in float32, are not reported non-finite (the exact max-norm decides those)."""
    ok = [torch.randn(5, 3), torch.randn(7)]
    assert all_finite(ok) and all_finite([])
    for bad in (float("nan"), float("inf"), -float("inf")):
        poisoned = [ok[0], ok[1].clone()]
        poisoned[1][3] = bad
        assert not all_finite(poisoned), bad
    huge = [torch.full((4,), 1e30), torch.randn(3)]
    assert not torch.nn.utils.get_total_norm(huge, norm_type=2.0).isfinite()  # it overflows
    assert all_finite(huge)
