"""The fused optimizer kernel is the default, and an optimizer config still decides."""

import hydra
import pytest
import torch
from conftest import EXPERIMENTS, compose_cfg

FAMILIES = ["ijepa_digits", "vicreg_digits", "digits_classifier", "vae_digits"]


@pytest.mark.parametrize("experiment", [e for e in FAMILIES if e in EXPERIMENTS])
def test_every_family_steps_with_the_fused_kernel_by_default(tmp_path, experiment):
    model = hydra.utils.instantiate(compose_cfg(tmp_path, [f"experiment={experiment}"]).model)
    optimizer = model.configure_optimizers()
    optimizer = optimizer["optimizer"] if isinstance(optimizer, dict) else optimizer
    assert all(group["fused"] for group in optimizer.param_groups)
    before = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    for p in model.parameters():
        p.grad = torch.ones_like(p) if p.requires_grad else None
    optimizer.step()  # the kernel runs here (CPU), and moves the weights
    after = [p for p in model.parameters() if p.requires_grad]
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))


@pytest.mark.parametrize(
    "override, fused",
    [
        ("model.optimizer.fused=false", False),
        ("+model.optimizer.foreach=true", None),
        ("model.optimizer._target_=torch.optim.RMSprop", None),  # no fused kernel: untouched
    ],
)
def test_an_optimizer_config_still_decides(tmp_path, override, fused):
    overrides = ["experiment=vicreg_digits", override]
    if "fused=false" in override:
        overrides[1] = "+" + override
    model = hydra.utils.instantiate(compose_cfg(tmp_path, overrides).model)
    optimizer = model.configure_optimizers()
    optimizer = optimizer["optimizer"] if isinstance(optimizer, dict) else optimizer
    assert optimizer.param_groups[0].get("fused") is fused
