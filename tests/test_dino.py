"""DINO, the third family: its state (the centre) moves in training steps only, a stopped run
resumes bitwise, the centre is the global batch's on every rank, and the head's prototype
rows keep norm 1."""

import hydra
import pytest
import torch
from conftest import compose_cfg

from trainlab.networks.encoder import pooled_layers
from trainlab.networks.heads import ProjectionHead
from trainlab.networks.masks import step_generator

SMALL = ["experiment=dino_digits", "model.encoder.depth=1", "data.batch_size=16"]


def small_dino(tmp_path):
    cfg = compose_cfg(tmp_path, SMALL)
    return hydra.utils.instantiate(cfg.model)


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
