"""hparams_search=optuna: a study that survives a killed sweep, and a pruner that stops trials."""

import json
import os
import subprocess
import sys
import time

import lightning as L
import optuna
import pytest
import torch
from conftest import ROOT
from omegaconf import OmegaConf
from optuna.trial import TrialState

from trainlab.callbacks.optuna_pruning import OptunaPruning
from trainlab.runs.table import main as runs_main
from trainlab.utils.optuna_internals import trial_id

# The swept learning rate is also the metric (LearningRateMonitor's lr-AdamW, no schedule in
# the classifier): a fixed toy metric, so which trials the threshold prunes is known.
SWEEP = [
    "-m",
    "hparams_search=optuna",
    "experiment=digits_classifier",
    "optimized_metric=lr-AdamW",
    "trainer.max_epochs=3",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.log_every_n_steps=1",
    "test=false",
    "extras.print_config=false",
    "hydra.sweeper.n_trials=3",
    "~hydra.sweeper.params",
    "+hydra.sweeper.params={model.optimizer.lr:'choice(0.001,0.01)'}",
    "hydra.sweeper.pruner._target_=optuna.pruners.ThresholdPruner",
    "~hydra.sweeper.pruner.n_startup_trials",
    "hydra.sweeper.pruner.n_warmup_steps=0",
    "+hydra.sweeper.pruner.lower=0.005",
]


def sweep(tmp_path, wait_for=None, extra=()):
    """Run the sweep; with ``wait_for``, SIGKILL it once that path exists."""
    cmd = [sys.executable, str(ROOT / "train.py"), *SWEEP, *extra, f"paths.log_dir={tmp_path}"]
    env = {**os.environ, "WANDB_MODE": "offline"}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    if wait_for is None:
        out = proc.communicate(timeout=300)[0].decode()
        assert proc.returncode == 0, out[-3000:]
        return out
    deadline = time.monotonic() + 300
    while not wait_for(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.kill()
    proc.communicate()


def second_trial_started(tmp_path):
    return any(tmp_path.glob("train/optuna/*/1/meta.json"))


@pytest.mark.slow  # about a minute: 5 jobs in 2 sweeps
def test_a_killed_sweep_continues_its_study_and_marks_pruned_trials(tmp_path):
    sweep(tmp_path, wait_for=second_trial_started)  # killed while trial 1 runs
    out = sweep(tmp_path)
    (study_dir,) = (tmp_path / "train" / "optuna").iterdir()  # the same command: one study
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    (summary,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    done = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(done) == 3, [(t.number, t.state) for t in trials]
    # The trial the kill interrupted is failed, and ran again with the same values.
    (failed,) = (t for t in trials if t.state == TrialState.FAIL)
    assert failed.number == 1 and "trial 1 was interrupted" in out
    # The re-run is the trial the sweeper enqueued with the failed one's values (numbered by
    # when Optuna created it, which depends on the kill's timing).
    (rerun,) = (t for t in trials if t.system_attrs.get("fixed_params") == failed.params)
    assert rerun.number > failed.number and rerun in done
    # The threshold (0.005) prunes exactly the trials whose metric (their lr) is below it,
    # after their first epoch; their run dirs say so, and the runs table reads them so.
    for t in done:
        pruned = float(t.params["model.optimizer.lr"]) < 0.005
        assert t.state == (TrialState.PRUNED if pruned else TrialState.COMPLETE)
        results = json.loads((study_dir / str(t.number) / "metrics.json").read_text())
        assert results.get("pruned") == ({"epoch": 0} if pruned else None)
    runs_main([str(study_dir), "--csv", str(tmp_path / "runs.csv")])
    table = (tmp_path / "runs.csv").read_text()
    assert table.count(",pruned,") == sum(t.state == TrialState.PRUNED for t in done)


@pytest.mark.slow  # two trials of 2 CPU ranks each: about 80 s
def test_every_rank_of_a_trial_trains_with_the_trial_values_and_is_pruned_with_it(tmp_path):
    """Multirun x DDP under the Optuna sweeper: each trial's child rank runs the trial's own
    config (its sampled lr), both ranks hold the same weights, and a pruned trial stops on
    both ranks after the same epoch (rank 0 decides, the other follows)."""
    ranks = [
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.sampler.seed=0",  # draws lr 0.01, then 0.001
        "+callbacks.rank_consistency._target_=trainlab.callbacks.rank_consistency.RankConsistency",
    ]
    sweep(tmp_path, extra=ranks)
    (study_dir,) = (tmp_path / "train" / "optuna").iterdir()
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    (summary,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    # Both learning rates drawn: one trial pruned, one complete.
    assert sorted(t.state for t in trials) == [TrialState.COMPLETE, TrialState.PRUNED]
    for t in trials:
        job = study_dir / str(t.number)
        lr = float(t.params["model.optimizer.lr"])
        assert OmegaConf.load(job / ".rank_config.yaml").model.optimizer.lr == lr
        report = json.loads((job / "rank_consistency.json").read_text())
        assert report["world_size"] == 2 and report["consistent"], report
        pruned = lr < 0.005  # the threshold pruner, as in the test above
        assert t.state == (TrialState.PRUNED if pruned else TrialState.COMPLETE)
        results = json.loads((job / "metrics.json").read_text())
        assert results["run"]["world_size"] == 2
        assert results.get("pruned") == ({"epoch": 0} if pruned else None)


class FixedMetric(L.LightningModule):
    """Logs the same val/acc at every epoch: a trial whose quality is known in advance."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value, self.layer = value, torch.nn.Linear(1, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).sum()

    def validation_step(self, batch, batch_idx):
        self.log("val/acc", self.value)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def fit_trial(
    study: optuna.Study, storage: str, value: float
) -> tuple[optuna.Trial, OptunaPruning, L.Trainer]:
    trial = study.ask()  # storage: the sqlite URL the sweeper would pass
    pruning = OptunaPruning(storage, study.study_name, trial_id(trial), "val/acc", study.pruner)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 1)))
    trainer = L.Trainer(
        max_epochs=4,
        callbacks=[pruning],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(FixedMetric(value), loader, loader)
    return trial, pruning, trainer


@pytest.mark.parametrize("value, pruned", [(0.1, True), (0.9, False)])
def test_the_median_pruner_stops_a_clearly_worse_trial_after_its_first_epoch(
    tmp_path, value, pruned
):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(
        study_name="s",
        storage=storage,
        direction="maximize",
        pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0),
    )
    first, _, _ = fit_trial(study, storage, 0.5)
    study.tell(first, 0.5)
    trial, pruning, trainer = fit_trial(study, storage, value)
    assert pruning.pruned_at == (0 if pruned else None)
    assert trainer.current_epoch == (1 if pruned else 4)
    reported = study.trials[trial.number].intermediate_values
    assert reported == pytest.approx({0: value} if pruned else {e: value for e in range(4)})


def test_optunas_private_name_is_where_it_was_checked():
    """utils/optuna_internals.py's trial id opens the same trial by Optuna's public API."""
    study = optuna.create_study()
    study.ask()
    trial = study.ask()
    assert optuna.trial.Trial(study, trial_id(trial)).number == trial.number == 1


def test_a_re_run_study_does_not_draw_its_first_trials_values_again(tmp_path):
    """Optuna's samplers restart their random stream in each process: a study continued by
    a new process drew trial 0's values as its trial 2 (the control below). ``reseed`` moves
    the stream on by the study's history."""
    from hydra_plugins.trainlab_optuna.optuna_sweeper import reseed

    space = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}

    def run(processes: int, fix: bool, db: str) -> list[float]:
        storage = f"sqlite:///{tmp_path / db}"
        for _ in range(processes):  # each "process": a new sampler from the same seed
            sampler = optuna.samplers.TPESampler(seed=1234, n_startup_trials=10)
            study = optuna.create_study(study_name="s", storage=storage, sampler=sampler,
                                        load_if_exists=True)  # fmt: skip
            if fix and study.trials:
                reseed(sampler, "s", len(study.trials))
            for _ in range(2):
                trial = study.ask(space)
                study.tell(trial, trial.params["lr"])
        return [t.params["lr"] for t in study.trials]

    unfixed, fixed = run(2, False, "unfixed.db"), run(2, True, "fixed.db")
    assert unfixed[2] == unfixed[0]  # the repeat, as found
    assert len(set(fixed)) == 4 and fixed[:2] == unfixed[:2]
    assert run(2, True, "again.db") == fixed  # reproducible: the same history, the same values


def trial_checkpointed(tmp_path):
    return any(tmp_path.glob("train/optuna/*/1/checkpoints/last.ckpt"))


@pytest.mark.slow  # two sweeps of 4 short trials: about a minute
def test_a_trial_stopped_by_sigterm_resumes_from_its_checkpoint_and_counts_once(tmp_path):
    extra = [
        "hydra.sweeper.n_trials=4", "hydra.sweeper.pruner=null", "trainer.max_epochs=12",
        "~hydra.sweeper.params", "+hydra.sweeper.params={model.optimizer.lr:'interval(0.001,0.01)'}",
    ]  # fmt: skip
    cmd = [sys.executable, str(ROOT / "train.py"), *SWEEP, *extra, f"paths.log_dir={tmp_path}"]
    env = {**os.environ, "WANDB_MODE": "offline"}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 300
    while not trial_checkpointed(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(15)  # SIGTERM: pre-emption
    proc.communicate(timeout=120)
    out = sweep(tmp_path, extra=extra)
    (study_dir,) = (tmp_path / "train" / "optuna").iterdir()
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    (summary,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4, [
        (t.number, t.state) for t in trials
    ]
    assert len({t.params["model.optimizer.lr"] for t in trials}) == 4  # no repeats
    assert "trial 1 was stopped: it resumes from its last.ckpt" in out
    assert "resuming from" in (study_dir / "1" / "train.log").read_text()


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("hydra.sweeper.n_trials=-1", "hydra.sweeper.n_trials=-1 is not valid"),
        ("hydra.sweeper.direction=sideways", "hydra.sweeper.direction='sideways' is not valid"),
        ("model.optimizer.lr=interval(0.1,0.01)", "the interval is empty"),
        ("model.optimizer.lr=interval(0.1,0.1)", "the interval is empty"),
        ("model.optimizer.lr=tag(log,interval(0,0.01))", "a log interval needs low > 0"),
        # the search space is not Hydra's config: the form that works is named
        ("hydra.sweeper.params.model.optimizer.lr=interval(1,2)", "'model.optimizer.lr=interval"),
    ],
)
def test_a_bad_sweeper_value_is_one_line_before_any_study_file(
    tmp_path, monkeypatch, capfd, override, needle
):
    """n_trials=-1 ran nothing, exit 0, and wrote an optuna.db; direction=sideways and an
    empty interval were tracebacks. The sweeper's signature is checked like every other
    class's, and its search space before the study is created."""
    from conftest import run_in_process

    import trainlab.commands

    argv = ["train.py", "-m", "hparams_search=optuna", f"paths.log_dir={tmp_path}", override]
    assert run_in_process(trainlab.commands.train_command, argv, monkeypatch) == 2
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error")]
    assert "Traceback" not in err and len(lines) == 1 and needle in lines[0], err[-2000:]
    assert not list(tmp_path.rglob("*.db")) and not list(tmp_path.rglob("multirun.yaml"))
