"""DINO, the third family (a part, docs/parts/dino.md): its loss against the formula, its
state (the centre) moves in training steps only, the head's prototype rows keep norm 1, and on
a timm CNN its teacher's BatchNorm follows the student and the teacher is what export, the
end-of-run table and a probe read."""

import json

import hydra
import pytest
import timm
import torch
import torch.nn.functional as F
from conftest import EXPERIMENTS, compose_cfg, run_in_process
from omegaconf import OmegaConf

import trainlab.commands
from trainlab.losses.dino import DINOLoss
from trainlab.networks.encoder import pooled_layers
from trainlab.networks.global_batch_norm import GlobalBatchNorm2d
from trainlab.networks.heads import ProjectionHead
from trainlab.networks.weights import export_encoder
from trainlab.utils.seeding import step_generator

SMALL = ["experiment=dino_digits", "model.encoder.depth=1", "data.batch_size=16"]


def small_dino(tmp_path):
    cfg = compose_cfg(tmp_path, SMALL)
    return hydra.utils.instantiate(cfg.model)


FAMILIES = ["resnet", "convnext", "timm"]  # timm: efficientnet_b0, BatchNormAct2d


def cnn_dino(tmp_path, family: str = "resnet"):
    cfg = compose_cfg(tmp_path, ["experiment=dino_digits_resnet", f"model/encoder={family}"])
    torch.manual_seed(0)
    return hydra.utils.instantiate(cfg.model), cfg


def views_of(cfg, batch: int = 8):
    g = torch.Generator().manual_seed(1)
    size = cfg.data.image_size
    return [torch.randn(batch, 1, size, size, generator=g) for _ in cfg.data.views]


def views(batch=16):
    g = torch.Generator().manual_seed(0)
    big = [torch.randn(batch, 1, 16, 16, generator=g) for _ in range(2)]
    return big + [torch.randn(batch, 1, 8, 8, generator=g) for _ in range(4)]


def test_the_loss_changes_no_state_and_the_training_step_moves_the_centre(tmp_path):
    """The memory estimate and preflight call loss() at every start: if loss() moved DINO's
    centre, a resumed run would differ from an uninterrupted one. Only the training step's
    update_state moves it."""
    model = small_dino(tmp_path)
    before = model.center.value.clone()
    for _ in range(2):
        loss, features = model.loss(views(), step_generator(0, 0, 0))
    assert torch.equal(model.center.value, before)
    assert loss.isfinite() and features.shape == (16, model.monitored_blocks * 192)
    model.update_state()  # what training_step does after the loss
    assert not torch.equal(model.center.value, before)


def test_the_teacher_is_evaluated_and_the_loss_trains_the_student_only(tmp_path):
    model = small_dino(tmp_path)
    loss, _ = model.loss(views(), step_generator(0, 0, 0))
    loss.backward()
    assert model.encoder.patch_embed.proj.weight.grad.abs().sum() > 0
    assert model.head.mlp[0].weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.target_encoder.parameters())
    with torch.no_grad():  # the monitors read the teacher: equal weights, equal features
        model.target_encoder.blocks[0].mlp.fc1.weight.add_(1.0)
    image = torch.randn(4, 1, 16, 16)
    teacher = torch.cat(pooled_layers(model.target_encoder, image, model.monitored_blocks), 1)
    assert torch.equal(model.monitored_features(image), teacher)


def test_the_prototypes_keep_rows_of_norm_one_and_too_few_views_are_refused(tmp_path):
    head = ProjectionHead(in_dim=8, out_dim=32, hidden=16, bottleneck=4)
    norms = head.prototypes.weight.norm(dim=1)
    assert torch.allclose(norms, torch.ones(32))
    assert not head.prototypes.parametrizations.weight.original0.requires_grad
    with pytest.raises(ValueError, match="DINO reads 2 global views"):
        small_dino(tmp_path).loss([torch.randn(2, 1, 16, 16)], step_generator(0, 0, 0))


def test_dino_loss_is_the_cross_entropy_over_every_other_view():
    g = torch.Generator().manual_seed(0)
    student = [torch.randn(8, 32, generator=g) for _ in range(4)]  # 2 global, 2 local views
    teacher = [torch.randn(8, 32, generator=g) for _ in range(2)]
    center = torch.randn(32, generator=g)
    dino = DINOLoss(student_temp=0.1, teacher_temp=0.04)
    targets = dino.targets(teacher, center)
    by_hand = torch.stack([
        -(F.softmax((teacher[i] - center) / 0.04, -1) * F.log_softmax(student[j] / 0.1, -1)).sum(-1).mean()
        for i in range(2) for j in range(4) if j != i
    ]).mean()  # fmt: skip
    assert dino(student, targets) == pytest.approx(by_hand.item(), rel=1e-6)
    for t in targets:  # a distribution over the prototypes per global view
        assert torch.allclose(t.sum(-1), torch.ones(8))


def test_dino_loss_and_centre_are_the_papers_on_hand_checked_values_and_gradients():
    """DINO (Caron et al. 2021, Algorithm 1, and main_dino.py's DINOLoss): for every global
    view i and every other view j, H(P_t(i), P_s(j)) with P_t = softmax((t - C) / tau_t) and
    P_s = softmax(s / tau_s), averaged; dH/ds_j = (P_s(j) - P_t(i)) / tau_s. The centre moves
    as C <- m C + (1 - m) mean(t). One image, 2 prototypes, written out with math alone."""
    import math

    from trainlab.networks.running_mean import RunningMean

    tau_s, tau_t, m = 0.5, 0.25, 0.9
    t = [[1.0, 0.0], [0.0, 0.5]]  # the teacher's logits on the 2 global views
    s = [[0.5, 0.0], [0.0, 1.0], [1.0, 1.5]]  # the student's on those and one local view
    c = [0.25, -0.25]

    def softmax(x, tau):
        e = [math.exp(v / tau) for v in x]
        return [v / sum(e) for v in e]

    p_t = [softmax([a - b for a, b in zip(row, c, strict=True)], tau_t) for row in t]
    p_s = [softmax(row, tau_s) for row in s]
    pairs = [(i, j) for i in range(2) for j in range(3) if j != i]  # 4 terms
    by_hand = sum(-sum(p_t[i][k] * math.log(p_s[j][k]) for k in range(2)) for i, j in pairs) / 4
    grads = [[0.0, 0.0] for _ in s]
    for i, j in pairs:
        for k in range(2):
            grads[j][k] += (p_s[j][k] - p_t[i][k]) / tau_s / 4

    student = [torch.tensor([row], dtype=torch.float64, requires_grad=True) for row in s]
    teacher = [torch.tensor([row], dtype=torch.float64) for row in t]
    dino = DINOLoss(student_temp=tau_s, teacher_temp=tau_t)
    loss = dino(student, dino.targets(teacher, torch.tensor(c, dtype=torch.float64)))
    assert loss.item() == pytest.approx(by_hand, abs=1e-12)
    loss.backward()
    for row, expected in zip(student, grads, strict=True):
        assert torch.allclose(row.grad[0], torch.tensor(expected, dtype=torch.float64))
    centre = RunningMean(2, m)
    centre.value.copy_(torch.tensor([c]))
    centre.update(torch.tensor(t))  # the mean of the two global views' outputs: [0.5, 0.25]
    expected = [m * c[0] + (1 - m) * 0.5, m * c[1] + (1 - m) * 0.25]
    assert torch.allclose(centre.value[0], torch.tensor(expected), atol=1e-7)


def test_dino_loss_is_lowest_when_the_student_predicts_the_target():
    g = torch.Generator().manual_seed(0)
    teacher = [torch.randn(16, 10, generator=g) for _ in range(2)]
    dino = DINOLoss(student_temp=1.0, teacher_temp=1.0)
    targets = dino.targets(teacher, torch.zeros(10))
    matched = dino([teacher[1], teacher[0]], targets)  # view j predicts target i != j
    random = dino([torch.randn(16, 10, generator=g) for _ in range(2)], targets)
    assert matched < random


def test_a_teachers_batchnorm_statistics_follow_its_student(tmp_path):
    """A teacher runs in eval mode, so its own BatchNorm never moves: after the EMA step it
    holds the student's statistics (``target_buffers = "copy"``), or their average."""
    model, cfg = cnn_dino(tmp_path)
    model.train()
    batch_norms = [m for m in model.target_encoder.modules() if isinstance(m, GlobalBatchNorm2d)]
    assert batch_norms and all(int(m.num_batches_tracked) == 0 for m in batch_norms)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)
    for step in range(3):
        loss, _ = model.loss(views_of(cfg), step_generator(0, 0, step))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        model.update_state()
        model.update_target(0.9)
    teacher, student = model.target_encoder.bn1, model.encoder.bn1
    assert int(teacher.num_batches_tracked) == int(student.num_batches_tracked) > 0
    assert teacher.running_mean.abs().sum() > 0
    assert torch.equal(teacher.running_var, student.running_var)
    before = teacher.running_mean.clone()
    model.target_buffers = "average"
    with torch.no_grad():
        model.encoder.bn1.running_mean.add_(1.0)
    model.update_target(0.75)
    assert torch.allclose(teacher.running_mean, before + 0.25, atol=1e-6)


@pytest.mark.slow  # two train.py runs (about 40 s): make test-slow
@pytest.mark.parametrize("family", FAMILIES)
def test_a_cnn_run_is_rated_and_probed_from_its_checkpoint(tmp_path, monkeypatch, family):
    """DINO on a timm CNN from train.py: the end-of-run table rates its teacher against the
    pixels and a random CNN; experiment=linear_probe on its checkpoint builds the run's
    encoder (family and all) and trains."""
    short = ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
             "data.batch_size=16", "test=false", "extras.print_config=false",
             "features.train_per_class=10", "features.eval_per_class=5", f"paths.log_dir={tmp_path}"]  # fmt: skip
    train = trainlab.commands.train_command
    argv = ["train.py", "experiment=dino_digits_resnet", f"model/encoder={family}", *short]
    assert run_in_process(train, [*argv, "run_name=cnn"], monkeypatch) == 0
    run_dir = tmp_path / "train" / "runs" / "cnn"
    metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    for key in ("features/linear_acc", "baseline/random_linear_acc", "baseline/pixels_knn_acc"):
        assert 0 <= metrics[key] <= 1, key
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    assert torch.load(ckpt, weights_only=True)["evaluated"] == "target_encoder"
    if "linear_probe" not in EXPERIMENTS:
        return  # the classifier part is removed: no probe to train
    probe = ["train.py", "experiment=linear_probe", f"model.init_from={ckpt}", *short, "run_name=probe"]  # fmt: skip
    assert run_in_process(train, probe, monkeypatch) == 0
    probed = json.loads((tmp_path / "train" / "runs" / "probe" / "metrics.json").read_text())
    assert "val/acc" in probed["metrics"]
    saved = OmegaConf.load(tmp_path / "train" / "runs" / "probe" / "config.yaml")
    assert saved.model.net.encoder.model_name == {"resnet": "resnet18", "convnext": "convnext_atto", "timm": "efficientnet_b0"}[family]  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
def test_export_writes_the_teacher_that_timm_loads_as_it_is(tmp_path, family):
    """The checkpoint names the teacher, export writes it, and
    ``timm.create_model(name, num_classes=0, in_chans=1)`` loads it strictly and computes
    what the run's teacher computes."""
    model, cfg = cnn_dino(tmp_path, family)
    with torch.no_grad():  # a teacher unlike its student, so a wrong pick shows
        for p in model.encoder.parameters():
            p.add_(0.01 * torch.randn_like(p))
    ckpt = tmp_path / "last.ckpt"
    checkpoint = {"state_dict": model.state_dict()}
    model.on_save_checkpoint(checkpoint)
    assert checkpoint["evaluated"] == "target_encoder"
    torch.save(checkpoint, ckpt)
    out = export_encoder(ckpt, tmp_path / "encoder.safetensors")
    timm_model = timm.create_model(
        cfg.model.encoder.model_name, num_classes=0, in_chans=1, pretrained=True,
        pretrained_cfg_overlay={"file": str(out)},
    ).eval()  # fmt: skip
    teacher = model.target_encoder.eval()
    x = torch.randn(2, 1, 32, 32)
    assert torch.allclose(timm_model(x), teacher(x), atol=1e-5)
    assert not torch.allclose(model.encoder.eval()(x), teacher(x), atol=1e-5)
    assert torch.allclose(model.eval()(x), teacher(x))  # the evaluation forward reads it too
