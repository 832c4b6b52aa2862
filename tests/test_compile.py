"""The compile part: ``compile=true`` compiles each network's repeated layer once (regional
compilation), with the inductor flags the running torch needs."""

import hydra
import pytest
import torch
from conftest import compose_cfg, run_cli

from trainlab.compiler.regional import apply_inductor_workarounds
from trainlab.utils import torch_internals


def test_compile_true_compiles_each_block_of_the_default_job_once(tmp_path):
    """Through the config (compile=true, the part's ``compiler`` node): the encoder's blocks
    are compiled one by one, not the whole network, and the compiled model runs."""
    cfg = compose_cfg(tmp_path, ["compile=true", "model.encoder.depth=2"])
    model = hydra.utils.instantiate(cfg.model)
    torch.compiler.reset()
    try:
        hydra.utils.instantiate(cfg.compiler)(model, backend=lambda gm, inputs: gm.forward)
        assert all(torch_internals.is_compiled(block) for block in model.encoder.blocks)
        assert not torch_internals.is_compiled(model.encoder)
        images = torch.randn(4, cfg.data.in_chans, cfg.data.image_size, cfg.data.image_size)
        assert torch.isfinite(model(images)).all()
    finally:
        torch.compiler.reset()


def test_inductor_workarounds_follow_the_torch_release():
    """Each flag is set on the releases that need it and left alone on the others."""
    config = torch_internals.inductor_config()
    both = {"triton.coalesce_tiling_analysis": True, "triton.mix_order_reduction": True}
    # 256-bit C++ kernels where the CPU has 512-bit ones (their NaN), whatever the release
    cpu = {"cpp.simdlen": 256} if torch.backends.cpu.get_cpu_capability().startswith("AVX512") else {}  # fmt: skip
    with config.patch({**both, "cpp.simdlen": None}):  # torch's own patch: restored afterwards
        assert apply_inductor_workarounds((2, 11)) == dict.fromkeys(both, False) | cpu
        assert not config.triton.coalesce_tiling_analysis
        assert not config.triton.mix_order_reduction
        assert config.cpp.simdlen == cpu.get("cpp.simdlen")
        config.triton.coalesce_tiling_analysis = True
        assert apply_inductor_workarounds((2, 15)) == {"triton.mix_order_reduction": False} | cpu
        assert config.triton.coalesce_tiling_analysis  # fixed in 2.12: left as it was


@pytest.mark.slow  # 2 ranks, each compiling the ViT's blocks: about 2 minutes
def test_compile_on_two_ranks_in_bf16_keeps_a_clean_console_and_plain_checkpoint_keys(tmp_path):
    """compile=true under DDP and bf16-mixed, as a GPU run is configured: no warning on the
    console (torch's, Lightning's, the model summary's), and the checkpoint keys are the
    plain ones (torch.compile(net) would prefix them with _orig_mod.)."""
    result = run_cli(
        "train.py", "compile=true", "trainer.precision=bf16-mixed",
        "trainer.accelerator=cpu", "trainer.devices=2", "trainer.max_epochs=1",
        "trainer.limit_train_batches=10", "trainer.log_every_n_steps=5",
        "trainer.limit_val_batches=2", "test=false", "features.enabled=false",
        "extras.print_config=false", f"paths.log_dir={tmp_path}", "run_name=compiled",
        cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    console = result.stdout + result.stderr
    for word in ("Warning", "warn", "recommended", "Traceback", "W1", "not supported"):
        assert word not in console, console[-3000:]
    ckpt = tmp_path / "train" / "runs" / "compiled" / "checkpoints" / "last.ckpt"
    keys = torch.load(ckpt, weights_only=True)["state_dict"]
    assert keys and not any("_orig_mod" in k for k in keys)
