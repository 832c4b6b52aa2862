"""The I-JEPA part's tests (docs/parts/ijepa.md): the module (EMA once per optimizer step,
schedules, what gets gradients and decay), its loss against the official formula, its recorded
trace, its configs and refusals, its checkpoints downstream, its tokens and MFU."""

import copy
import json
from pathlib import Path

import hydra
import lightning as L
import pytest
import torch
import torch.nn.functional as F
from conftest import (
    EXPERIMENTS,
    FAST,
    assert_one_clear_line,
    assert_trace_unchanged,
    compose_cfg,
    logged_series,
    run_cli,
    run_train,
)
from test_folder import photos

from trainlab.eval import evaluate
from trainlab.losses.feature_regression import FeatureRegressionLoss
from trainlab.model.ijepa import IJEPA
from trainlab.networks.weights import network_parts, read_state
from trainlab.optim.schedules import cosine, linear, warmup_cosine
from trainlab.training import train
from trainlab.utils import lightning_internals, torch_internals


def tiny_ijepa(tmp_path, *overrides):
    cfg = compose_cfg(
        tmp_path,
        [
            "experiment=ijepa_digits",
            "model.encoder.depth=1",
            "model.predictor.depth=1",
            "model.masks.min_keep=2",
            *overrides,
        ],
    )
    return hydra.utils.instantiate(cfg.model), hydra.utils.instantiate(cfg.data)


@pytest.mark.parametrize("distance", ["smooth_l1", "l1", "l2"])
def test_feature_regression_is_its_distance_in_float32(distance):
    pred, target = torch.randn(4, 6, 8).bfloat16(), torch.randn(4, 6, 8).bfloat16()
    loss = FeatureRegressionLoss(distance)(pred, target)
    fn = {"smooth_l1": F.smooth_l1_loss, "l1": F.l1_loss, "l2": F.mse_loss}[distance]
    assert loss.dtype == torch.float32
    assert loss == fn(pred.float(), target.float())
    assert FeatureRegressionLoss(distance)(pred, pred) == 0


def test_feature_regression_is_ijepas_smooth_l1_on_hand_checked_values_and_gradients():
    """The official I-JEPA code (src/train.py, ``loss = F.smooth_l1_loss(z, h)``, beta 1)
    averages over every predicted element: 0.5 d^2 where |d| < 1, else |d| - 0.5; its
    gradient is d (or the sign of d) over the element count. Checked by hand on 4 values."""
    pred = torch.tensor([[[0.5, -2.0], [3.0, 0.0]]], dtype=torch.float64, requires_grad=True)
    target = torch.tensor([[[0.0, 0.0], [1.0, 0.25]]], dtype=torch.float64)
    loss = FeatureRegressionLoss("smooth_l1")(pred, target)
    # d = 0.5, -2, 2, -0.25: 0.125, 1.5, 1.5, 0.03125; mean 3.15625 / 4
    assert loss.dtype == torch.float64 and loss.item() == pytest.approx(3.15625 / 4, abs=1e-15)
    loss.backward()
    assert torch.equal(pred.grad, torch.tensor([[[0.5, -1.0], [1.0, -0.25]]]).double() / 4)
    l2 = FeatureRegressionLoss("l2")(pred.detach(), target)  # the paper's L2: mean d^2
    assert l2.item() == pytest.approx((0.25 + 4 + 4 + 0.0625) / 4, abs=1e-15)


def test_schedules_hit_their_end_points():
    assert warmup_cosine(0, 100, 10, 2e-4, 1e-3, 1e-6) == pytest.approx(2e-4)
    assert warmup_cosine(10, 100, 10, 2e-4, 1e-3, 1e-6) == pytest.approx(1e-3)
    assert warmup_cosine(100, 100, 10, 2e-4, 1e-3, 1e-6) == pytest.approx(1e-6)
    assert cosine(0, 50, 0.04, 0.4) == pytest.approx(0.04)
    assert cosine(50, 50, 0.04, 0.4) == pytest.approx(0.4)
    assert linear(25, 50, 0.996, 1.0) == pytest.approx(0.998)


def test_a_schedule_scale_stretches_the_schedules_past_the_run_but_not_the_warm_up(tmp_path):
    from types import SimpleNamespace

    run = SimpleNamespace(estimated_stepping_batches=100, max_epochs=10)  # 10 steps an epoch
    at = {}
    for scale in (1.0, 2.0):
        model, _ = tiny_ijepa(tmp_path, f"model.schedule_scale={scale}", "model.warmup_epochs=1")
        lightning_internals.attach_trainer(model, run)
        at[scale] = {step: model.schedules(step) for step in (10, 100)}
    assert at[1.0][10]["lr"] == at[2.0][10]["lr"] == pytest.approx(model.peak_lr)  # peak
    assert at[1.0][100]["ema"] == pytest.approx(1.0)  # the paper's: frozen at the end
    # the last step of the stretched run is the half-way point of a run twice as long,
    # with the same 10-step warm-up
    half = warmup_cosine(
        100, 200, 10, model.hparams.start_lr, model.peak_lr, model.hparams.final_lr
    )
    assert at[2.0][100]["lr"] == pytest.approx(half, rel=1e-6)
    assert at[2.0][100]["ema"] == pytest.approx(linear(100, 200, *model.hparams.ema))
    assert at[2.0][100]["ema"] < 1.0 and at[2.0][100]["lr"] > 10 * at[1.0][100]["lr"]


def test_the_ema_schedule_shape_is_config(tmp_path):
    from types import SimpleNamespace

    model, _ = tiny_ijepa(tmp_path, "model.ema_shape=cosine", "model.schedule_scale=1")
    lightning_internals.attach_trainer(
        model, SimpleNamespace(estimated_stepping_batches=100, max_epochs=10)
    )
    ema = [model.schedules(step)["ema"] for step in (0, 25, 50, 100)]
    assert ema == pytest.approx([cosine(s, 100, *model.hparams.ema) for s in (0, 25, 50, 100)])
    assert ema[1] != pytest.approx(linear(25, 100, *model.hparams.ema))  # not the linear one
    assert ema[0] == pytest.approx(0.996) and ema[-1] == pytest.approx(1.0)


def test_ema_steps_once_per_optimizer_step_under_accumulation(tmp_path, monkeypatch):
    model, data = tiny_ijepa(tmp_path)
    momenta = []
    update = IJEPA.update_target
    monkeypatch.setattr(
        IJEPA, "update_target", lambda self, m: (momenta.append(m), update(self, m))
    )
    before = [p.clone() for p in model.target_encoder.parameters()]
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=6,
        accumulate_grad_batches=3,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    trainer.fit(model, datamodule=data)
    assert trainer.global_step == 2 and len(momenta) == 2  # 6 micro-batches, 2 optimizer steps
    # The schedule spans schedule_scale x the real number of optimizer steps: with the
    # laptop default of 2, 0.996 at step 0 -> 0.997 at step 1 of the 4 it spans.
    assert model.hparams.schedule_scale == 2.0
    assert momenta == pytest.approx([0.996, 0.997])
    moved = [
        not torch.equal(a, b)
        for a, b in zip(before, model.target_encoder.parameters(), strict=True)
    ]
    assert any(moved)
    assert all(not p.requires_grad for p in model.target_encoder.parameters())


def test_per_step_numbers_are_logged_only_at_the_logging_interval(tmp_path, monkeypatch):
    """Each self.log of a Python number is a host-to-device copy (a host sync on a GPU):
    the schedules and token counts are logged at the steps the logger writes, and no others."""
    from lightning.pytorch.loggers import CSVLogger

    model, data = tiny_ijepa(tmp_path)
    logged = []
    log_dict = IJEPA.log_dict
    monkeypatch.setattr(
        IJEPA, "log_dict", lambda self, d, **kw: (logged.append(set(d)), log_dict(self, d, **kw))
    )
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=6,
        log_every_n_steps=3,
        limit_val_batches=0,
        logger=CSVLogger(tmp_path, name="csv"),
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    trainer.fit(model, datamodule=data)
    written = logged_series(tmp_path / "csv", "train/lr")
    assert len(written) == 2  # steps 3 and 6 of 6
    for key in ("train/lr", "train/ctx_tokens"):
        assert sum(key in keys for keys in logged) == len(written), key


def test_validation_does_not_change_training(tmp_path):
    """The monitors (probe fit, kNN) draw no training randomness: validating every epoch or
    never gives bitwise the same weights, so ijepa_mnist may validate every 5 epochs."""
    weights, validated = [], []
    for every in (1, 3):
        L.seed_everything(0)
        model, data = tiny_ijepa(tmp_path / str(every))
        start = model.encoder.blocks[0].attn.qkv.weight.clone()
        trainer = L.Trainer(
            accelerator="cpu",
            max_epochs=2,
            limit_train_batches=3,
            limit_val_batches=2,
            check_val_every_n_epoch=every,
            num_sanity_val_steps=0,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
        )
        trainer.fit(model, datamodule=data)
        assert not torch.equal(start, model.encoder.blocks[0].attn.qkv.weight)  # it trained
        validated.append("val/knn_acc" in trainer.callback_metrics)
        weights.append({k: v for k, v in model.state_dict().items() if not k.startswith("online")})
    assert validated == [True, False]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_target_encoder_is_the_ema_of_the_encoder(tmp_path):
    model, _ = tiny_ijepa(tmp_path)
    with torch.no_grad():
        for p in model.encoder.parameters():
            p.add_(1.0)
    target_before = [p.clone() for p in model.target_encoder.parameters()]
    model.update_target(0.9)
    for t0, t1, e in zip(
        target_before, model.target_encoder.parameters(), model.encoder.parameters(), strict=True
    ):
        assert torch.allclose(t1, 0.9 * t0 + 0.1 * e, atol=1e-6)


def test_the_online_monitors_read_the_protocols_last4_view(tmp_path):
    """What the monitors see is what eval.py mode=features rates (its ``last4`` view of the
    target encoder), so their numbers can agree; the loss is the paper's on the same forward."""
    from trainlab.evaluation.features import encoder_views
    from trainlab.utils.seeding import step_generator

    model, data = tiny_ijepa(tmp_path, "model.encoder.depth=4")
    data.setup("fit")
    images, _ = next(iter(data.val_dataloader()))
    model.eval()
    with torch.no_grad():
        _, features = model.loss(images, step_generator(0, -1, 0))
        expected = encoder_views(model.target_encoder)(images)["last4"]
    assert features.shape == (len(images), 4 * model.encoder.embed_dim)
    assert torch.allclose(features, expected, atol=1e-5)


def test_no_weight_decay_on_biases_and_norms(tmp_path):
    model, _ = tiny_ijepa(tmp_path)
    optimizer = model.configure_optimizers()
    by_name = {g["name"]: g for g in optimizer.param_groups}
    for name in ("encoder/no_decay", "predictor/no_decay"):
        assert by_name[name]["weight_decay"] == 0.0
        assert all(p.ndim <= 1 for p in by_name[name]["params"])
    assert all(p.ndim > 1 for p in by_name["encoder/decay"]["params"])
    encoder_ids = {id(p) for p in model.encoder.parameters() if p.requires_grad}
    grouped = {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert encoder_ids <= grouped
    assert not {id(p) for p in model.target_encoder.parameters()} & grouped


def test_loss_gradients_reach_encoder_and_predictor_but_not_the_target(tmp_path):
    model, data = tiny_ijepa(tmp_path)
    data.setup()
    # as Lightning delivers it: uint8 from the loader, normalised after the transfer
    images, labels = data.on_after_batch_transfer(next(iter(data.train_dataloader())), 0)
    from trainlab.utils.seeding import step_generator

    loss, features = model.loss(images, step_generator(0, 0, 0))
    loss.backward()
    assert model.encoder.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
    assert model.predictor.blocks[0].mlp.fc1.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.target_encoder.parameters())
    assert features.shape == (len(images), model.encoder.embed_dim) and not features.requires_grad


@pytest.mark.parametrize("fused_attn", [True, False])
@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("gated", [False, True])
def test_predictor_last_block_on_target_rows_matches_every_row(fused_attn, checkpointing, gated):
    """The predictor's last block on the mask tokens' rows alone (RowsBlock) against
    timm's Block on every row: the same predictions and the same gradients, with torch's
    fused attention and written out (a bf16 run on a CPU), with and without checkpointing,
    and with timm's optional attention output gate (a fork may turn it on)."""
    from trainlab.networks.predictor import Predictor

    torch.manual_seed(0)
    predictor = Predictor((4, 4), 32, pred_dim=24, depth=2, num_heads=4,
                          grad_checkpointing=checkpointing).train()  # fmt: skip
    for block in predictor.blocks:
        block.attn.fused_attn = fused_attn
        if gated:
            block.attn.gate = torch.nn.Linear(24, 24)
    context = torch.randn(3, 6, 32, requires_grad=True)
    context_idx = torch.stack([torch.randperm(16)[:6] for _ in range(3)])
    target_idx = torch.randint(0, 16, (3, 2, 4))
    results = []
    for all_rows in (True, False):
        predictor.all_rows_in_last_block = all_rows
        predictor.zero_grad()
        context.grad = None
        pred = predictor(context, context_idx, target_idx)
        pred.square().sum().backward()
        grads = [p.grad.clone() for p in predictor.parameters() if p.requires_grad]
        results.append((pred.detach(), context.grad.clone(), grads))
    (every, d_every, g_every), (rows, d_rows, g_rows) = results
    assert rows.shape == (3, 2, 4, 32)
    torch.testing.assert_close(rows, every)
    torch.testing.assert_close(d_rows, d_every)
    for a, b in zip(g_rows, g_every, strict=True):
        torch.testing.assert_close(a, b)


def test_step_tokens_and_flops_count_what_the_step_runs(tmp_path):
    """IJEPA.count_work (what tokens/s, TFLOP/s and MFU are made of) against the step itself:
    tokens from the step's masks, FLOPs within 3 % of FlopCounterMode over forward and
    backward (the formula leaves out norms and the predictor's in/out projections; measured
    1.1 % at the ijepa_mnist shape with a linear patch embedding. Its CNN stem runs as dense
    matrices, 28 % more than the model's FLOPs there, which the count leaves out)."""
    from torch.utils.flop_counter import FlopCounterMode

    from trainlab.utils.seeding import step_generator

    model, _ = tiny_ijepa(tmp_path, "model.encoder.depth=2", "model.predictor.depth=2")
    images = torch.randn(8, 1, 16, 16)
    masks = model.masks(8, step_generator(0, 0, 0))
    with FlopCounterMode(display=False) as counted:
        loss, _ = model.loss(images, step_generator(0, 0, 0))
        loss.backward()
    n, k, (m, t) = model.encoder.num_patches, masks.context.shape[1], masks.targets.shape[1:]
    assert model.step_tokens == 8 * (n + k + m * (k + t))
    assert counted.get_total_flops() == pytest.approx(model.step_flops, rel=0.03)


def mask_counts(model, steps: int) -> set[tuple[int, int]]:
    """The (context, target) token counts of the first ``steps`` steps' masks."""
    from trainlab.utils.seeding import step_generator

    return {
        (masks.context.shape[1], masks.targets.shape[2])
        for masks in (model.masks(8, step_generator(0, 0, step)) for step in range(steps))
    }


@pytest.mark.slow  # inductor compiles a block of each network, forward and backward: ~1 minute
def test_compiled_steps_match_eager_in_bf16_and_stop_recompiling_after_warm_up(tmp_path):
    """compile=true (inductor) against an eager copy under bf16 autocast, over 20 steps of
    the paper's masks, whose context and target counts change: every step's loss within
    bf16 tolerance, and no new graph after the first 3 steps."""
    import copy

    from trainlab.compiler.regional import compile_networks
    from trainlab.utils.seeding import step_generator

    torch.compiler.reset()
    eager, _ = tiny_ijepa(tmp_path, "data.image_size=32")  # an 8 x 8 grid: many counts
    compiled = copy.deepcopy(eager)
    compile_networks(compiled)
    images = torch.randn(8, 1, 32, 32)
    for step in range(20):
        if step == 3:
            graphs = torch_internals.unique_graphs()
        losses = []
        for model in (eager, compiled):
            model.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss, _ = model.loss(images, step_generator(0, 0, step))
            loss.backward()
            losses.append(loss.float())
        # bf16 keeps 8 bits of mantissa: inductor's fused kernels round in other places
        torch.testing.assert_close(losses[1], losses[0], rtol=2e-2, atol=1e-3)
    assert len(mask_counts(eager, 20)) > 2  # the steps really had different counts
    assert torch_internals.unique_graphs() == graphs


def test_an_ijepa_run_reports_its_tokens_and_mfu(tmp_path, capsys):
    """I-JEPA counts its tokens and FLOPs (count_work): a run's summary has its throughput
    and, with a peak given, its MFU; every logged interval counts tokens."""
    train(compose_cfg(tmp_path, ["experiment=ijepa_digits", *FAST, "trainer.log_every_n_steps=1",
                                 "peak_tflops=0.5", "test=false"]))  # fmt: skip
    run = json.loads((tmp_path / "run" / "metrics.json").read_text())["run"]
    assert run["train_tokens_per_s"] > run["train_samples_per_s"] > 0
    assert 0 < run["train_mfu"] == pytest.approx(run["train_tflops_per_s"] / 0.5, rel=0.01)
    assert "train tokens/s" in capsys.readouterr().out
    logged = logged_series(tmp_path / "run", "train/tokens_per_s")
    assert logged and all(v > 0 for v in logged)


def test_ijepa_digits_trace_is_bitwise_unchanged(tmp_path):
    """experiment=ijepa_digits' per-step losses exactly as recorded: refactors must not change
    I-JEPA's numbers (conftest.assert_trace_unchanged)."""
    traces = Path(__file__).parent / "fixtures" / "ijepa_digits_trace"
    assert_trace_unchanged(tmp_path, traces, ["experiment=ijepa_digits"])


def test_sigreg_adds_its_weighted_term_to_the_loss_and_leaves_the_masks(tmp_path):
    from trainlab.utils.seeding import step_generator

    model, data = tiny_ijepa(tmp_path, "model.var_cov=0.0", "model.sigreg=1.0")
    data.setup()
    images = data.on_after_batch_transfer(next(iter(data.train_dataloader())), 0)[0]
    with torch.no_grad():
        with_term = model.loss(images, step_generator(0, 0, 0))[0]
        model.hparams.sigreg = 0.0  # same weights and masks (drawn first): only the term differs
        without = model.loss(images, step_generator(0, 0, 0))[0]
    assert with_term - without > 1e-3


def test_var_cov_adds_its_weighted_term_to_the_loss(tmp_path):
    from trainlab.utils.seeding import step_generator

    model, data = tiny_ijepa(tmp_path, "model.var_cov=1.0")
    data.setup()
    images = data.on_after_batch_transfer(next(iter(data.train_dataloader())), 0)[0]
    with torch.no_grad():
        with_term = model.loss(images, step_generator(0, 0, 0))[0]
        model.hparams.var_cov = 0.0  # same weights, masks and images: only the term differs
        without = model.loss(images, step_generator(0, 0, 0))[0]
    assert with_term - without > 1e-3


def test_the_regularised_variant_at_zero_is_the_papers_method(tmp_path):
    """configs/model/ijepa.yaml builds RegularisedIJEPA; with every term at 0 and no jitter
    (experiment=ijepa) its loss is the paper class's, bit for bit, on the same weights."""
    from trainlab.utils.seeding import step_generator

    zeros = ("model.var_cov=0.0", "model.sigreg=0.0", "model.invariance=0.0")
    regularised, data = tiny_ijepa(tmp_path, *zeros)
    kept = ("var_cov", "sigreg", "invariance", "context_jitter")
    paper_cfg = {k: v for k, v in regularised.hparams.items() if k not in kept}
    paper = IJEPA(
        encoder=copy.deepcopy(regularised.encoder),
        predictor=lambda **_: copy.deepcopy(regularised.predictor),
        masks=lambda **_: copy.deepcopy(regularised.masks),
        optimizer=regularised.make_optimizer,
        **paper_cfg,
    )
    paper.load_state_dict(regularised.state_dict())
    data.setup()
    images = data.on_after_batch_transfer(next(iter(data.train_dataloader())), 0)[0]
    with torch.no_grad():
        want = regularised.loss(images, step_generator(0, 0, 0))[0]
        got = paper.loss(images, step_generator(0, 0, 0))[0]
    assert type(paper) is IJEPA and got == want
    with torch.no_grad():
        regularised.hparams.var_cov = 1.0
        assert regularised.loss(images, step_generator(0, 0, 0))[0] != want


def test_invariance_adds_the_gap_between_pooled_context_and_pooled_target(tmp_path):
    from trainlab.utils.seeding import step_generator

    # depth 2: the monitors' features hold two blocks, and the term must read the last one
    model, data = tiny_ijepa(tmp_path, "model.invariance=2.0", "model.encoder.depth=2")
    data.setup()
    images = data.on_after_batch_transfer(next(iter(data.train_dataloader())), 0)[0]
    with torch.no_grad():
        model.encoder.blocks[-1].mlp.fc2.bias.add_(0.5)  # context and target encoders differ
        with_term = model.loss(images, step_generator(0, 0, 0))[0]
        model.hparams.invariance = 0.0  # same weights and masks (drawn first)
        without = model.loss(images, step_generator(0, 0, 0))[0]
        context = model.masks(len(images), step_generator(0, 0, 0)).context
        gap = torch.nn.functional.mse_loss(
            model.encoder(images, context).mean(dim=1), model.target_encoder(images)
        )
    assert gap > 1e-3
    torch.testing.assert_close(with_term - without, 2.0 * gap, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("how", ["layer", "channel", "none"])
def test_target_norm_normalises_tokens_or_channels_and_leaves_the_monitors(tmp_path, how):
    model, data = tiny_ijepa(tmp_path, f"model.target_norm={how}")
    data.setup()
    images = data.on_after_batch_transfer(next(iter(data.train_dataloader())), 0)[0]
    with torch.no_grad():
        features, target = model.targets(images)
        output = model.target_encoder.forward_features(images)  # after the final norm
    d = target.shape[-1]
    if how == "layer":  # each token: zero mean, unit variance over its channels
        axes = (-1,)
    elif how == "channel":  # each channel: zero mean, unit variance over the batch's tokens
        axes = (0, 1)
    else:
        torch.testing.assert_close(target, output)
        axes = None
    if axes is not None:
        zeros = torch.zeros_like(target.mean(dim=axes))
        torch.testing.assert_close(target.mean(dim=axes), zeros, atol=1e-4, rtol=0)
        ones = torch.ones_like(zeros)
        torch.testing.assert_close(target.var(dim=axes, unbiased=False), ones, atol=1e-3, rtol=0)
    torch.testing.assert_close(features[:, -d:], output.mean(dim=1))  # monitors unchanged


def test_a_jittered_context_changes_the_loss_not_the_targets_or_the_monitors(tmp_path):
    from trainlab.networks.view_jitter import random_affine
    from trainlab.utils.seeding import step_generator

    model, data = tiny_ijepa(tmp_path, "model.context_jitter={degrees:10,translate:0.1,scale:0.1}")
    data.setup()
    images = data.on_after_batch_transfer(next(iter(data.train_dataloader())), 0)[0]
    with torch.no_grad():
        jittered, features = model.loss(images, step_generator(0, 0, 0))
        model.hparams.context_jitter = None  # same weights and masks: only the view differs
        plain, same_features = model.loss(images, step_generator(0, 0, 0))
    assert abs(jittered - plain) > 1e-4 and torch.equal(features, same_features)
    # no deformation is the identity; a shift moves the image
    g = torch.Generator().manual_seed(0)
    assert torch.allclose(random_affine(images, g, 0, 0, 0), images, atol=1e-4)
    assert not torch.allclose(random_affine(images, g, 0, 0.2, 0), images, atol=1e-2)


def test_stochastic_depth_regularises_the_context_encoder_never_the_targets(tmp_path):
    # depth 2: timm's rates rise linearly from 0 at the first block to 0.5 at the last
    model, data = tiny_ijepa(tmp_path, "model.encoder.drop_path_rate=0.5", "model.encoder.depth=2")
    data.setup()
    images = data.on_after_batch_transfer(next(iter(data.train_dataloader())), 0)[0]
    model.train()
    assert model.encoder.training and not model.target_encoder.training
    with torch.no_grad():
        assert torch.equal(model.targets(images)[1], model.targets(images)[1])
        assert not torch.equal(model.encoder(images), model.encoder(images))


@pytest.mark.slow  # 8 s of dynamo tracing; make test-oldest runs it too: make test-slow, which CI runs
def test_compile_traces_each_block_once_for_every_layer_and_every_mask_count(tmp_path):
    """compile=true with the paper's masks: each network's blocks are compiled one at a time
    (regional compilation) with their token count dynamic. Over 20 steps of changing
    context and target counts no graph is added after the first 3, and a network three
    times as deep adds no graph. dynamo's counters, through a recording backend that runs
    the graphs eagerly: dynamo's tracing and guards, without inductor's minutes on a CPU."""
    from trainlab.compiler.regional import compile_networks
    from trainlab.utils.seeding import step_generator

    images = torch.randn(8, 1, 32, 32)
    graphs = {}
    for depth in (1, 3):
        torch.compiler.reset()
        torch_internals.clear_dynamo_counters()
        model, _ = tiny_ijepa(
            tmp_path, "data.image_size=32", f"model.encoder.depth={depth}",
            f"model.predictor.depth={depth + 1}",  # its last block is another kind (RowsBlock)
        )  # fmt: skip
        compile_networks(model, backend=lambda gm, inputs: gm.forward)
        compiled = [model.encoder.blocks, model.target_encoder.blocks, model.predictor.blocks]
        assert all(torch_internals.is_compiled(block) for blocks in compiled for block in blocks)
        assert not torch_internals.is_compiled(model.encoder)  # the blocks, not the whole network
        for step in range(20):
            if step == 3:
                after_warm_up = torch_internals.unique_graphs()
            loss, _ = model.loss(images, step_generator(0, 0, step))
            loss.backward()
        graphs[depth] = torch_internals.unique_graphs()
        assert graphs[depth] == after_warm_up
    assert len(mask_counts(model, 20)) > 2  # the steps really had different counts
    assert graphs[3] == graphs[1] <= 4, graphs  # encoder, target encoder, predictor's 2 kinds


def test_rank_consistency_checksums_the_modules_own_buffers(tmp_path):
    from trainlab.callbacks.rank_consistency import RankConsistency

    model, _ = tiny_ijepa(tmp_path)
    assert "own buffers" not in RankConsistency._checksums(model)  # I-JEPA registers none
    model.register_buffer("centre", torch.full((3,), 0.5))
    sums = RankConsistency._checksums(model)
    assert float(sums["own buffers"]) == 1.5 and "encoder" in sums


def test_the_saved_activation_probe_runs_eagerly_under_compile(tmp_path):
    """Under compile=true the probe's saved-tensor hooks (the memory estimate's) were traced and recompiled 18 times
    on an H100 (2 minutes before the first step): the probe now adds no graph at all."""
    from trainlab.compiler.regional import compile_networks
    from trainlab.model.saved_activations import saved_activation_bytes

    torch.compiler.reset()
    model, _ = tiny_ijepa(tmp_path)
    compile_networks(model, backend=lambda gm, inputs: gm.forward)
    before = torch_internals.unique_graphs()
    assert saved_activation_bytes(model, torch.randn(2, 1, 16, 16)) > 0
    assert torch_internals.unique_graphs() == before


@pytest.mark.slow  # 20 s: make test-slow (CI runs it after make test)
def test_eval_features_rates_an_official_format_checkpoint(tmp_path):
    cfg = compose_cfg(tmp_path, ["experiment=ijepa_digits"])
    encoder = hydra.utils.instantiate(cfg.model.encoder)
    path = tmp_path / "official.pth.tar"
    state = {f"module.{k}": v for k, v in encoder.state_dict().items()}
    torch.save({"encoder": state, "target_encoder": state, "epoch": 1}, path)
    result = run_cli(
        "eval.py",
        "mode=features",
        f"ckpt_path={path}",
        "data=digits",
        "data.image_size=16",
        "model=ijepa",
        "model.encoder.size=vit_tiny",
        "model.encoder.patch_size=4",
        "model.encoder.depth=4",
        "features.baselines=false",
        f"paths.log_dir={tmp_path}",
        "run_name=e",
        "extras.print_config=false",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((tmp_path / "eval" / "runs" / "e" / "metrics.json").read_text())["metrics"]
    assert sorted(metrics) == ["features/knn_acc", "features/linear_acc"]
    assert metrics["features/linear_acc"] > 0.3  # a random ViT on digits is well above chance


def test_ijepa_experiment_is_the_paper_recipe(cfg_factory):
    cfg = cfg_factory("experiment=ijepa")
    enc, pred, m = cfg.model.encoder, cfg.model.predictor, cfg.model
    assert (enc.size, enc.patch_size, cfg.data.image_size) == ("vit_huge", 14, 224)
    assert (pred.depth, pred.pred_dim, pred.num_heads) == (12, 384, 16)  # the encoder's heads
    assert cfg.data.global_batch_size == 2048 and cfg.trainer.precision == "bf16-mixed"
    assert cfg.trainer.max_epochs == 300 and m.warmup_epochs == 40
    assert (m.start_lr, m.optimizer.lr, m.final_lr) == (2e-4, 1e-3, 1e-6)
    assert list(m.ema) == [0.996, 1.0]
    assert list(m.weight_decay) == [0.04, 0.4] and list(cfg.data.crop_scale) == [0.3, 1.0]
    assert list(m.masks.target_scale) == [0.15, 0.2] and m.masks.num_targets == 4


def test_probe_loads_the_chosen_encoder_of_a_pretraining_checkpoint(tmp_path):
    """experiment=linear_probe on an I-JEPA checkpoint: the part features.init_part names."""
    if "linear_probe" not in EXPERIMENTS:
        pytest.skip("the classifier part is removed")
    cfg = compose_cfg(tmp_path, ["experiment=ijepa_digits"])
    ijepa = hydra.utils.instantiate(cfg.model)
    with torch.no_grad():
        for p in ijepa.target_encoder.parameters():
            p.add_(1.0)  # make the two encoders differ
    path = tmp_path / "pretrained.ckpt"
    torch.save({"state_dict": ijepa.state_dict()}, path)
    probe_cfg = compose_cfg(tmp_path, ["experiment=linear_probe", f"model.init_from={path}"])
    probe = hydra.utils.instantiate(probe_cfg.model)
    for name in ("target_encoder", "encoder"):
        net = hydra.utils.instantiate(probe_cfg.model.net, init_part=name)
        net.load_weights(str(path))
        expected = getattr(ijepa, name).state_dict()
        assert all(torch.equal(v, expected[k]) for k, v in net.encoder.state_dict().items())
    target = ijepa.target_encoder.state_dict()
    assert all(torch.equal(v, target[k]) for k, v in probe.net.encoder.state_dict().items())


def test_ijepa_from_a_runs_checkpoint_takes_its_predictor_heads_and_encoder(tmp_path):
    """The head count changes no weight's shape: I-JEPA continued from a trainlab run takes
    the run's predictor heads (and encoder shape), or it would load the weights silently
    into another function; what the command line gives still wins."""
    from omegaconf import OmegaConf

    from trainlab.checks.checkpoint_config import adopt_checkpoint_shape

    run = tmp_path / "pretrain"
    (run / "checkpoints").mkdir(parents=True)
    source = ["experiment=ijepa_digits", "model.predictor.num_heads=2", "model.encoder.depth=3"]
    OmegaConf.save(compose_cfg(tmp_path / "p", source), run / "config.yaml")
    ckpt = run / "checkpoints" / "last.ckpt"
    cfg = compose_cfg(tmp_path / "again", ["experiment=ijepa_digits", f"model.init_from={ckpt}"])
    assert cfg.model.predictor.num_heads == 4
    adopt_checkpoint_shape(cfg, [])
    assert (cfg.model.predictor.num_heads, cfg.model.encoder.depth) == (2, 3)
    given = ["model.predictor.num_heads=1"]
    cfg = compose_cfg(
        tmp_path / "given", ["experiment=ijepa_digits", f"model.init_from={ckpt}", *given]
    )
    adopt_checkpoint_shape(cfg, given)
    assert (cfg.model.predictor.num_heads, cfg.model.encoder.depth) == (1, 3)


def test_ijepa_eval_reproduces_the_online_evaluation(tmp_path):
    """eval.py restores the kNN bank from the checkpoint (and refits the probe on it): same
    test metrics."""
    train_cfg = compose_cfg(
        tmp_path / "t",
        [o for o in FAST if "limit_test" not in o]
        + ["experiment=ijepa_digits", "model.encoder.depth=2"],
    )
    train(train_cfg)
    results = json.loads((tmp_path / "t" / "run" / "metrics.json").read_text())
    eval_cfg = compose_cfg(tmp_path / "e", [f"ckpt_path={results['checkpoints']['best']}"], "eval")
    metrics = evaluate(eval_cfg)
    for key in ("test/loss", "test/probe_acc", "test/knn_acc", "test/rankme"):
        assert metrics[key] == pytest.approx(results["metrics"][key], rel=1e-4, abs=1e-6), key
    # A real checkpoint of this project is a valid model.init_from (read with weights_only=True).
    parts = network_parts(read_state(results["checkpoints"]["last"]))
    assert set(parts) == {"encoder", "target_encoder", "predictor", "evaluated"}
    # I-JEPA rates its EMA target encoder: the checkpoint says so
    assert parts["evaluated"] is parts["target_encoder"]


def test_the_model_summary_counts_the_evaluation_forward_flops(cfg_factory):
    """Lightning's summary runs ijepa_digits' example image through I-JEPA's forward (the
    target encoder): its FLOPs are the blocks' formula plus the patch embedding, exactly."""
    from hydra.utils import instantiate
    from lightning.pytorch.utilities.model_summary import ModelSummary

    from trainlab.networks.flops import blocks_flops, patch_embed_flops

    model = instantiate(cfg_factory("experiment=ijepa_digits").model)
    encoder = model.target_encoder
    tokens = encoder.num_patches
    patch_embedding = tokens * patch_embed_flops(encoder.patch_embed)
    # setup() takes the example from the data module (image_size, in_chans) in a Trainer
    model.example_input_array = torch.zeros(1, 1, 16, 16)
    summary = ModelSummary(model)
    assert summary.total_flops == blocks_flops(encoder.blocks, tokens) + patch_embedding


def test_a_masked_method_trains_on_gray_photos_and_ends_without_a_table(
    tmp_path, monkeypatch, capfd
):
    """I-JEPA's masks on 1-channel photos, their mean measured: trained, judged by RankMe,
    and with no labelled set the run ends with one line instead of the table."""
    root = photos(tmp_path / "photos", n=40)
    code, err = run_train(
        tmp_path, monkeypatch, capfd, "experiment=ijepa_digits", "data=folder",
        f"data.root={root}", "data.num_workers=0", "data.batch_size=8", "data.in_chans=1",
        "data.image_size=16", "data.std=[0.25]", "run_name=gray", "features.enabled=true",
    )  # fmt: skip
    assert code == 0, err[-3000:]
    run_dir = tmp_path / "logs" / "train" / "runs" / "gray"
    metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    assert "val/rankme" in metrics and not any(k.startswith("features/") for k in metrics)
    said = "frozen features not rated: data=folder has no labels and features.data names no"
    assert said in (run_dir / "train.log").read_text()


def test_an_unknown_choice_of_a_model_is_named_with_its_options(tmp_path, monkeypatch, capfd):
    code, err = run_train(
        tmp_path,
        monkeypatch,
        capfd,
        "run_name=bad",
        "experiment=ijepa_digits",
        "model.target_norm=batch",
    )
    assert code != 0
    assert_one_clear_line(err, "model.target_norm='batch'", "'layer', 'channel' or 'none'")
    assert not (tmp_path / "logs" / "train" / "runs" / "bad" / "checkpoints").exists()


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("tokens, dim, heads", [(50, 192, 3), (197, 384, 6), (17, 96, 4)])
def test_block_flops_formula_matches_torch_flop_counter(tokens, dim, heads, fused):
    """trainlab.networks.flops against FlopCounterMode, forward and forward + backward (3x),
    with attention as matmuls and as the CPU's fused kernel (whose formula flops.py adds to
    the counter: without it, attention counts 0 and the fused case fails)."""
    from timm.models.vision_transformer import Block
    from torch.utils.flop_counter import FlopCounterMode

    from trainlab.networks.flops import block_flops

    block = Block(dim, heads, mlp_ratio=4.0)
    block.attn.fused_attn = fused
    x = torch.randn(2, tokens, dim, requires_grad=True)
    with FlopCounterMode(display=False) as forward:
        y = block(x)
    with FlopCounterMode(display=False) as backward:
        y.sum().backward()
    expected = 2 * block_flops(tokens, dim, 4 * dim)
    assert forward.get_total_flops() == pytest.approx(expected, rel=0.02)
    total = forward.get_total_flops() + backward.get_total_flops()
    assert total == pytest.approx(3 * expected, rel=0.02)


def test_patch_embed_flops_formula_matches_torch_flop_counter():
    """flops.patch_embed_flops against FlopCounterMode for the CNN stem run as convolutions
    (patches above MATRIX_MAX_PATCH) and for timm's linear embedding, on 2 images."""
    from timm.layers import PatchEmbed
    from torch.utils.flop_counter import FlopCounterMode

    from trainlab.networks.flops import patch_embed_flops
    from trainlab.networks.patch_stem import MATRIX_MAX_PATCH, ConvPatchEmbed

    p = MATRIX_MAX_PATCH + 2
    for embed in (
        ConvPatchEmbed(img_size=2 * p, patch_size=p, in_chans=3, embed_dim=32, width=8),
        PatchEmbed(img_size=2 * p, patch_size=p, in_chans=3, embed_dim=32),
    ):
        with FlopCounterMode(display=False) as counted:
            embed(torch.randn(2, 3, 2 * p, 2 * p))
        assert counted.get_total_flops() == 2 * 4 * patch_embed_flops(embed)  # 2 images x 4 patches


def test_the_cpu_attention_kernel_counts_its_flops():
    """networks/flops.py gives FlopCounterMode the CPU fused-attention kernel's formula
    (torch_internals.CPU_FLASH_ATTENTION): without it attention counts 0 on a CPU."""
    from torch.utils.flop_counter import FlopCounterMode

    from trainlab.networks import flops  # noqa: F401  (registers the CPU attention formulas)

    q = torch.randn(1, 2, 4, 8)
    with FlopCounterMode(display=False) as counter:
        F.scaled_dot_product_attention(q, q, q)
    assert counter.get_total_flops() == 2 * 2 * (2 * 4 * 4 * 8)  # QK^T and PV, 2 heads
