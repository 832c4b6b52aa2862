"""Any timm encoder behind timm's own contract (networks/encoder.py): a ResNet and a ConvNeXt
train, are monitored, rated, exported into timm and probed like the project's ViT; their
BatchNorm is the global batch's."""

import copy
import json

import pytest
import timm
import torch
from conftest import compose_cfg, run_in_process
from hydra.utils import instantiate
from omegaconf import open_dict

import trainlab.commands
from trainlab.evaluation.features import encoder_views
from trainlab.networks.encoder import layer_widths, pooled_and_layers, pooled_layers, pooled_width
from trainlab.networks.global_batch_norm import (
    GlobalBatchNorm2d,
    GlobalBatchNormAct2d,
    per_rank_batch_norms,
    to_global_batch_norm,
)
from trainlab.networks.grad_strides import keep_grad_strides, same_layout
from trainlab.networks.weights import export_encoder
from trainlab.utils import torch_internals
from trainlab.utils.ddp_buffers import keep_out_of_buffer_broadcast

FAMILIES = ["resnet", "convnext", "timm"]  # timm: efficientnet_b0, BatchNormAct2d


def model_of(tmp_path, experiment: str, encoder: str | None = None):
    overrides = [f"experiment={experiment}"] + ([f"model/encoder={encoder}"] if encoder else [])
    cfg = compose_cfg(tmp_path, overrides)
    torch.manual_seed(0)
    return instantiate(cfg.model), cfg


@pytest.mark.parametrize("family", FAMILIES)
def test_a_timm_encoder_is_read_through_timms_api_alone(tmp_path, family):
    """The monitors' features are the last 4 stages pooled (widths from feature_info), the
    pooled forward is timm's, and one forward gives both as two would."""
    model, cfg = model_of(tmp_path, "vicreg_digits_resnet", family)
    encoder = model.encoder.eval()
    x = torch.randn(3, 1, 32, 32)
    widths = layer_widths(encoder, 4)
    assert widths == [i["num_chs"] for i in encoder.feature_info[-4:]]
    assert model.monitored_features(x).shape == (3, sum(widths))
    pooled, layers = pooled_and_layers(encoder, x, 4)
    assert torch.allclose(pooled, encoder(x), atol=1e-5)
    for a, b in zip(layers, pooled_layers(encoder, x, 4), strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    assert encoder(x).shape == (3, pooled_width(encoder))
    got = encoder_views(encoder)(x)
    assert got["last"].shape == (3, widths[-1]) and got["last4"].shape == (3, sum(widths))


@pytest.mark.parametrize("family", FAMILIES)
def test_export_writes_the_evaluated_network_that_timm_loads_as_it_is(tmp_path, family):
    """VICReg's encoder (DINO's teacher: tests/test_dino.py): the checkpoint names it, export
    writes it, and ``timm.create_model(name, num_classes=0, in_chans=1)`` loads it strictly and computes
    what the run's network computes."""
    model, cfg = model_of(tmp_path, "vicreg_digits_resnet", family)
    ckpt = tmp_path / "last.ckpt"
    checkpoint = {"state_dict": model.state_dict()}
    model.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, ckpt)
    out = export_encoder(ckpt, tmp_path / "encoder.safetensors")
    name = cfg.model.encoder.model_name
    timm_model = timm.create_model(
        name, num_classes=0, in_chans=1, pretrained=True, pretrained_cfg_overlay={"file": str(out)}
    ).eval()
    evaluated = getattr(model, model.evaluated).eval()
    x = torch.randn(2, 1, 32, 32)
    assert torch.allclose(timm_model(x), evaluated(x), atol=1e-5)
    assert torch.allclose(model.eval()(x), evaluated(x))  # the evaluation forward reads it too


def test_buffers_kept_from_ddps_broadcast_add_to_the_list():
    module = torch.nn.Module()
    torch_internals.set_ddp_ignored_names(module, {"a.x"})
    keep_out_of_buffer_broadcast(module, ["b.y"])
    keep_out_of_buffer_broadcast(module, ["a.x", "c.z"])
    assert torch_internals.ddp_ignored_names(module) == {"a.x", "b.y", "c.z"}


def test_ddp_broadcasts_a_per_rank_batchnorms_statistics_and_no_other_buffer():
    """A method's own state (a centre) and the monitors' bank are kept out of DDP's
    broadcast without being named; a timm ResNet's per-rank BatchNorm statistics are not,
    until the encoder's BatchNorm is the global batch's."""
    from functools import partial

    from trainlab.model.self_supervised import SelfSupervised

    encoder = timm.create_model("resnet18", num_classes=0, in_chans=1)
    model = SelfSupervised(encoder, optimizer=partial(torch.optim.AdamW, lr=1e-3), num_classes=3)
    model.register_buffer("center", torch.zeros(4))
    statistics = {f"encoder.{name}" for name, _ in encoder.named_buffers()}
    assert statistics and "encoder.bn1.running_mean" in statistics
    kept = set(model.equal_on_every_rank())
    assert kept == {name for name, _ in model.named_buffers()} - statistics
    assert "center" in kept and any(name.startswith("online.") for name in kept)
    model.encoder = to_global_batch_norm(encoder)
    assert set(model.equal_on_every_rank()) == {name for name, _ in model.named_buffers()}


def test_a_convnexts_gradients_keep_their_parameters_strides_and_values():
    """Depthwise and 1x1 convolution gradients come back with other strides in size-1
    dimensions (DDP warns on them); restrided, they are the same numbers at the same
    addresses. A real layout difference (channels_last) is left alone."""
    torch.manual_seed(0)
    plain = timm.create_model("convnext_atto", num_classes=0, in_chans=1)
    hooked = keep_grad_strides(copy.deepcopy(plain))
    x = torch.randn(4, 1, 32, 32)
    plain(x).sum().backward()
    grads = {n: p.grad.clone() for n, p in plain.named_parameters()}
    strides = {n: p.grad.stride() for n, p in plain.named_parameters()}
    hooked(x).sum().backward()
    moved = [n for n, p in plain.named_parameters() if strides[n] != p.stride()]
    assert moved  # the case exists: without the hooks, strides differ
    for n, p in hooked.named_parameters():
        assert p.grad.stride() == p.stride(), n
        assert torch.equal(p.grad, grads[n]), n
    nhwc = torch.empty(4, 3, 5, 5).to(memory_format=torch.channels_last)
    assert not same_layout(nhwc, torch.empty(4, 3, 5, 5))


@pytest.mark.parametrize("name", ["efficientnet_b0", "regnetx_002", "mobilenetv3_small_100"])
def test_every_batchnorm_of_a_timm_cnn_is_the_global_kind_with_its_activation_kept(tmp_path, name):
    """timm's BatchNormAct2d (BatchNorm, drop, activation) cannot take the project's norm
    class and would run per rank silently: each is GlobalBatchNormAct2d, computing what timm's
    own module computes on one process, weights and statistics in place. The data's image
    size, which timm.yaml gives every model, does not reach a CNN's constructor."""
    cfg = compose_cfg(
        tmp_path, ["experiment=vicreg_digits_efficientnet", f"model.encoder.model_name={name}"]
    )
    torch.manual_seed(0)
    encoder = instantiate(cfg.model.encoder)
    torch.manual_seed(0)
    plain = timm.create_model(name, num_classes=0, in_chans=1)
    assert per_rank_batch_norms(encoder) == [] and per_rank_batch_norms(plain) != []
    kinds = {type(m) for m in encoder.modules()}
    assert GlobalBatchNormAct2d in kinds or GlobalBatchNorm2d in kinds
    assert encoder.state_dict().keys() == plain.state_dict().keys()
    x = torch.randn(4, 1, 32, 32)
    assert torch.allclose(encoder.train()(x), plain.train()(x), atol=1e-5)  # act and drop kept
    assert torch.allclose(encoder.eval()(x), plain.eval()(x), atol=1e-5)  # statistics moved alike


def test_a_timm_vit_is_built_for_the_datas_image_size_and_monitored(tmp_path):
    """timm builds a ViT for one input size (224 in its name): model/encoder=timm gives it the
    data's, so vit_tiny_patch16_224 trains on 32 px digits, its monitors on the last 4 blocks."""
    overrides = ["model/encoder=timm", "model.encoder.model_name=vit_tiny_patch16_224"]
    cfg = compose_cfg(tmp_path, [*overrides, "data.image_size=32"])
    model = instantiate(cfg.model)
    x = torch.randn(3, 1, 32, 32)
    assert model.encoder.patch_embed.img_size == (32, 32)
    assert model.encoder(x).shape == (3, 192)
    assert model.monitored_features(x).shape == (3, 4 * 192)


def test_per_rank_batchnorm_on_two_ranks_is_refused_unless_named(tmp_path):
    """2 ranks with a per-rank BatchNorm in the encoder differ from 1 process with no word:
    refused in one line naming the key, kept where the user names per_rank; and
    trainer.sync_batchnorm=true, which would drop a BatchNormAct2d's activation, refused."""
    from trainlab.checks.preflight import check_batch_statistics
    from trainlab.utils.errors import ConfigError

    model, cfg = model_of(tmp_path, "vicreg_digits_resnet")
    check_batch_statistics(cfg, model, world_size=2)  # global: accepted
    model.encoder.bn1.__class__ = torch.nn.BatchNorm2d  # one left per rank, as a fork's own
    check_batch_statistics(cfg, model, world_size=1)  # one process: nothing to differ from
    with pytest.raises(
        ConfigError, match=r"1 BatchNorms .*\(bn1, \.\.\.\).*model.encoder.batch_norm=global"
    ):
        check_batch_statistics(cfg, model, world_size=2)
    named = compose_cfg(
        tmp_path, ["experiment=vicreg_digits_resnet", "model.encoder.batch_norm=per_rank"]
    )
    check_batch_statistics(named, model, world_size=2)
    with open_dict(cfg):  # a fork's own encoder: no such argument to name
        del cfg.model.encoder["batch_norm"]
    with pytest.raises(
        ConfigError, match=r"\(bn1, \.\.\.\).* Build them with .*to_global_batch_norm"
    ):
        check_batch_statistics(cfg, model, world_size=2)
    timm_model, timm_cfg = model_of(tmp_path, "vicreg_digits_efficientnet")
    synced = compose_cfg(
        tmp_path, ["experiment=vicreg_digits_efficientnet", "trainer.sync_batchnorm=true"]
    )
    with pytest.raises(ConfigError, match="trainer.sync_batchnorm=true would turn the model's"):
        check_batch_statistics(synced, timm_model, world_size=2)


@pytest.mark.slow  # a train.py run with the end-of-run table (about 60 s): make test-slow
def test_an_encoder_written_to_the_contract_alone_trains_rates_and_exports(tmp_path, monkeypatch):
    """VICReg on tests/fixtures/contract_encoder.py's CNN, from train.py: it trains, the
    end-of-run table rates it, and export writes what the same class loads strictly."""
    from fixtures.contract_encoder import ContractCNN
    from safetensors.torch import load_file

    node = "{_target_:fixtures.contract_encoder.ContractCNN,in_chans:1}"
    argv = ["train.py", "experiment=vicreg_digits", "~model.encoder", f"+model.encoder={node}",
            "trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
            "test=false", "extras.print_config=false", "features.train_per_class=10",
            "features.eval_per_class=5", f"paths.log_dir={tmp_path}", "run_name=own"]  # fmt: skip
    assert run_in_process(trainlab.commands.train_command, argv, monkeypatch) == 0
    run_dir = tmp_path / "train" / "runs" / "own"
    metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    assert 0 <= metrics["features/linear_acc"] <= 1 and 0 <= metrics["features/knn_acc"] <= 1
    out = export_encoder(run_dir / "checkpoints" / "last.ckpt", tmp_path / "own.safetensors")
    encoder = ContractCNN(in_chans=1)
    encoder.load_state_dict(load_file(str(out)), strict=True)
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert torch.equal(encoder.stages[0][0].weight, saved["encoder.stages.0.0.weight"])


def test_images_below_a_cnns_stride_are_refused_and_a_vit_is_not(tmp_path):
    """16 px images into resnet18 (stride 32) would train on maps of padding: refused in one
    line naming the size and the stride; 32 px, and a ViT at 16 px, pass."""
    from trainlab.checks.preflight import refuse_images_below_the_stride
    from trainlab.utils.errors import ConfigError

    model, cfg = model_of(tmp_path, "vicreg_digits_resnet")
    refuse_images_below_the_stride(cfg, model)  # 32 px
    vit, vit_cfg = model_of(tmp_path, "vicreg_digits")
    with open_dict(vit_cfg):
        vit_cfg.data.image_size = 16
    refuse_images_below_the_stride(vit_cfg, vit)
    with open_dict(cfg):
        cfg.data.image_size = 16
    with pytest.raises(ConfigError) as refused:
        refuse_images_below_the_stride(cfg, model)
    assert str(refused.value) == (
        "data.image_size=16 is below the stride of resnet18 (32): its last stages would see "
        "maps of padding; give data.image_size=32 or more"
    )
