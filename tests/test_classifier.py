"""The classifier part: supervised training, the linear probe and fine-tuning with layer-wise LR
decay (model/classifier.py, networks/encoder_classifier.py)."""

import json
import re
from functools import partial
from pathlib import Path

import lightning as L
import pytest
import timm
import torch
from conftest import TWO_CPU_RANKS, compose_cfg, run_cli
from hydra.utils import instantiate
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.classification import MulticlassAccuracy

from trainlab.eval import evaluate
from trainlab.model.classifier import Classifier
from trainlab.networks.encoder_classifier import EncoderClassifier
from trainlab.networks.vit import ViTEncoder
from trainlab.training import train

ENCODER = dict(img_size=16, patch_size=4, in_chans=1, size="vit_tiny", depth=4)


def make_classifier(freeze=True, pooling="avg", **kwargs):
    torch.manual_seed(0)
    net = EncoderClassifier(
        ViTEncoder(**ENCODER, drop_path_rate=0.1), 10, pooling=pooling, freeze_encoder=freeze
    )
    return Classifier(net, 10, partial(torch.optim.AdamW, lr=1e-2), **kwargs)


def fit(model, steps=3):
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 1, 16, 16, generator=g), torch.randint(0, 10, (32,)))
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(model, DataLoader(data, batch_size=8))
    return trainer


def test_frozen_encoder_is_bitwise_unchanged_and_gets_no_gradients():
    model = make_classifier(freeze=True)
    encoder_before = {k: v.clone() for k, v in model.net.encoder.state_dict().items()}
    head_before = {k: v.clone() for k, v in model.net.head.state_dict().items()}
    trainer = fit(model)
    for key, value in model.net.encoder.state_dict().items():
        assert torch.equal(value, encoder_before[key]), key
    assert all(p.grad is None for p in model.net.encoder.parameters())
    assert any(not torch.equal(v, head_before[k]) for k, v in model.net.head.state_dict().items())
    optimized = {id(p) for g in trainer.optimizers[0].param_groups for p in g["params"]}
    assert not optimized & {id(p) for p in model.net.encoder.parameters()}
    assert not model.net.encoder.training  # drop path off while probing


def test_fine_tuning_with_mixup_cutmix_and_label_smoothing_trains_every_layer():
    model = make_classifier(freeze=False, mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1)
    before = [p.clone() for p in model.net.encoder.blocks[0].parameters()]
    fit(model, steps=2)
    after = list(model.net.encoder.blocks[0].parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
    assert model.net.encoder.training  # drop path on while fine-tuning


def test_last_four_layers_concatenated_are_four_times_wider():
    x = torch.randn(2, 1, 16, 16)
    one = make_classifier(pooling="avg").net.eval()
    four = make_classifier(pooling="avg_last4").net.eval()
    assert one.features(x).shape == (2, 192)
    assert four.features(x).shape == (2, 4 * 192)
    # The last of the four slices is the last layer's pooled feature.
    assert torch.allclose(four.features(x)[:, -192:], one.features(x), atol=1e-5)


def test_layer_wise_lr_decay_gives_each_depth_its_rate():
    """Rates read from the groups that hold named parameters, not from the group names the
    same code wrote: embeddings lr x 0.5^5, block i lr x 0.5^(4 - i), the head lr."""
    model = make_classifier(freeze=False, layer_decay=0.5)
    optimizer = model.configure_optimizers()
    group_of = {id(p): group for group in optimizer.param_groups for p in group["params"]}
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}  # not pos_embed
    assert len(group_of) == len(params)  # every trained parameter is optimised, once
    expected = {  # 4 blocks: the embeddings are depth 0, blocks 1-4, the head 5
        "net.encoder.patch_embed.proj.weight": 1e-2 * 0.5**5,
        "net.encoder.patch_embed.proj.bias": 1e-2 * 0.5**5,
        "net.encoder.blocks.0.attn.qkv.weight": 1e-2 * 0.5**4,
        "net.encoder.blocks.3.mlp.fc2.weight": 1e-2 * 0.5,
        "net.head.1.weight": 1e-2,
    }
    for name, lr in expected.items():
        assert group_of[id(params[name])]["lr"] == pytest.approx(lr), name
    assert group_of[id(params["net.head.1.weight"])]["weight_decay"] == 0.01
    assert group_of[id(params["net.head.1.bias"])]["weight_decay"] == 0.0
    assert group_of[id(params["net.encoder.blocks.0.norm1.weight"])]["weight_decay"] == 0.0


# Under DDP the probe's val/acc equals the whole validation set's: test_distributed.py.


def test_probe_takes_the_encoder_shape_from_the_checkpoints_run(tmp_path):
    """experiment=linear_probe on a vicreg_mnist checkpoint: patch 7 at 28 px, not the
    experiment's patch 4 at 16 px; what the command line gives still wins."""
    from omegaconf import OmegaConf

    from trainlab.checks.checkpoint_config import adopt_checkpoint_shape

    run = tmp_path / "pretrain"
    (run / "checkpoints").mkdir(parents=True)
    OmegaConf.save(compose_cfg(tmp_path / "p", ["experiment=vicreg_mnist"]), run / "config.yaml")
    ckpt = run / "checkpoints" / "last.ckpt"
    given = ["model.net.encoder.depth=3"]
    cfg = compose_cfg(
        tmp_path / "probe", ["experiment=linear_probe", f"model.init_from={ckpt}", *given]
    )
    adopt_checkpoint_shape(cfg, given)
    enc = cfg.model.net.encoder
    assert (enc.patch_size, enc.size, enc.depth, enc.stem_width) == (7, "vit_tiny", 3, 16)
    assert cfg.data.image_size == 28 and enc.img_size == 28  # ${data.image_size}
    # No run dir (an official or timm file): the config's shape stays.
    cfg = compose_cfg(tmp_path / "probe2", ["experiment=linear_probe", "model.init_from=/x.pth"])
    adopt_checkpoint_shape(cfg, [])
    assert cfg.model.net.encoder.patch_size == 4


def test_probe_of_a_checkpoint_without_target_encoder_loads_its_encoder(tmp_path, caplog):
    torch.manual_seed(1)
    source = ViTEncoder(**ENCODER)
    path = tmp_path / "mae.ckpt"
    torch.save({"state_dict": {f"encoder.{k}": v for k, v in source.state_dict().items()}}, path)
    net = EncoderClassifier(ViTEncoder(**ENCODER), 10, init_part="target_encoder")
    net.load_weights(str(path))
    assert "holds no target_encoder: loading its encoder instead" in caplog.text
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            net.encoder.state_dict().values(), source.state_dict().values(), strict=True
        )
    )


def test_a_probe_reads_any_family_and_decays_by_timms_layer_groups():
    torch.manual_seed(0)
    net = EncoderClassifier(timm.create_model("resnet18", num_classes=0, in_chans=1), 10,
                            pooling="avg_last4", freeze_encoder=True, head_norm=True)  # fmt: skip
    assert net.feature_dim == 64 + 128 + 256 + 512
    assert net(torch.randn(4, 1, 32, 32)).shape == (4, 10)
    ids = {n: net.layer_id(n) for n, _ in net.named_parameters()}
    assert ids["encoder.conv1.weight"] == 0 and ids["head.1.weight"] == max(ids.values())
    assert ids["encoder.layer4.1.conv2.weight"] > ids["encoder.layer1.0.conv1.weight"]
    vit = EncoderClassifier(ViTEncoder(img_size=16, patch_size=4, in_chans=1, size="vit_tiny",
                                       depth=4), 10)  # fmt: skip
    vit_ids = {n: vit.layer_id(n) for n, _ in vit.named_parameters()}
    assert vit_ids["encoder.patch_embed.proj.weight"] == 0
    assert vit_ids["encoder.blocks.2.attn.qkv.weight"] == 3 and vit_ids["head.1.weight"] == 5


def test_last4_features_match_the_hand_written_forward():
    """EncoderClassifier's avg_last4 comes from timm's forward_intermediates; it must equal the
    block loop it replaced, with and without activation checkpointing."""
    torch.manual_seed(0)
    enc = ViTEncoder(img_size=16, patch_size=4, in_chans=1, size="vit_tiny", depth=5).eval()
    x = torch.randn(3, 1, 16, 16)
    with torch.no_grad():
        tokens = enc.norm_pre(enc.patch_embed(x).flatten(1, 2) + enc.pos_embed)  # NHWC: any size
        expected = []
        for i, block in enumerate(enc.blocks):
            tokens = block(tokens)
            if i >= len(enc.blocks) - 4:
                expected.append(enc.norm(tokens).mean(dim=1))
        expected = torch.cat(expected, dim=1)
        net = EncoderClassifier(enc, num_classes=10, pooling="avg_last4")
        assert torch.allclose(net.features(x), expected, atol=1e-6)
    enc.set_grad_checkpointing(True)
    enc.train()
    assert torch.allclose(net.features(x), expected, atol=1e-5)


def test_train_then_eval_give_the_same_test_metric(tmp_path, capsys):
    train_cfg = compose_cfg(
        tmp_path / "t", ["experiment=digits_classifier", "trainer.max_epochs=2"]
    )
    train(train_cfg)
    flops = re.search(r"Total FLOPs: (\S+)", capsys.readouterr().out)
    assert flops and flops[1] != "0"  # the model summary ran the classifier on an image
    results = json.loads((tmp_path / "t" / "run" / "metrics.json").read_text())
    best = results["checkpoints"]["best"]
    assert Path(best).is_file() and Path(results["checkpoints"]["last"]).is_file()
    assert results["run"]["global_batch_size"] == train_cfg.data.batch_size
    assert results["run"]["precision"] == "32-true"  # the precision the run ran, resolved
    assert results["run"]["fit_seconds"] > 0
    for key in ("train/loss", "val/loss", "val/acc", "test/acc", "test/loss"):
        assert key in results["metrics"], key

    eval_cfg = compose_cfg(tmp_path / "e", [f"ckpt_path={best}"], "eval")
    metrics = evaluate(eval_cfg)
    assert results["metrics"]["test/acc"] > 0.3  # learned something in 2 epochs: chance is 0.1
    assert metrics["test/acc"] == pytest.approx(results["metrics"]["test/acc"], abs=1e-6)
    assert metrics["test/loss"] == pytest.approx(results["metrics"]["test/loss"], rel=1e-5)
    assert (tmp_path / "e" / "run" / "metrics.json").exists()


def test_a_classifier_checkpoint_gives_its_encoder_to_the_feature_protocol(tmp_path):
    from conftest import compose_cfg
    from hydra.utils import instantiate

    from trainlab.evaluation.checkpoint import load_encoder

    cfg = compose_cfg(tmp_path, ["experiment=supervised_vit", "model.net.encoder.depth=1"])
    classifier = instantiate(cfg.model)
    with torch.no_grad():
        classifier.net.encoder.blocks[0].mlp.fc2.bias.add_(1.0)  # not what a fresh init holds
    path = tmp_path / "classifier.ckpt"
    torch.save({"state_dict": classifier.state_dict()}, path)
    # a classifier has no target encoder: the protocol rates its encoder, head left out
    encoder = load_encoder(cfg.model.net.encoder, str(path), "target_encoder")
    for key, value in classifier.net.encoder.state_dict().items():
        assert torch.equal(encoder.state_dict()[key], value), key


@pytest.mark.parametrize(
    "experiment, extra",
    [
        ("digits_classifier", ["trainer.max_epochs=2"]),
        # A frozen random encoder with a linear head: the linear probe.
        pytest.param(
            "linear_probe",
            ["trainer.max_epochs=2", "model.warmup_epochs=0"],
            marks=pytest.mark.slow,  # a second 2-process run of the same check: make test-slow
        ),
    ],
)
@pytest.mark.slow  # 16 s: make test-slow, which CI runs
def test_ddp_validation_metric_equals_the_whole_validation_set(tmp_path, experiment, extra):
    """Evaluation is not padded across ranks: val/acc and val/loss logged by 2 ranks are
    those of every validation sample exactly once (an odd count, so padding would show)."""
    overrides = [f"experiment={experiment}", "data.val_fraction=0.101", *extra]
    cfg = compose_cfg(tmp_path / "compose", overrides)
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    n_val = len(datamodule.val_set)
    assert n_val % 2 == 1, n_val
    result = run_cli(
        "train.py",
        *overrides,
        *TWO_CPU_RANKS,
        "strategy=ddp",
        "extras.print_config=false",
        "features.enabled=false",  # the end-of-run rating: test_train covers it
        "test=false",
        f"paths.log_dir={tmp_path}",
        "run_name=probe",
        cwd=tmp_path,
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Warning" not in result.stdout + result.stderr, result.stderr[-3000:]
    run_dir = tmp_path / "train" / "runs" / "probe"
    logged = json.loads((run_dir / "metrics.json").read_text())["metrics"]

    last = run_dir / "checkpoints" / "last.ckpt"
    # last.ckpt holds the last epoch (with Lightning 2.6's own save_last it stays at the
    # best epoch: for digits_classifier val/acc falls in epoch 2 with this seed).
    assert torch.load(last, weights_only=True)["epoch"] == cfg.trainer.max_epochs - 1
    model = Classifier.load_from_checkpoint(
        last, net=instantiate(cfg.model.net), optimizer=None
    ).eval()
    accuracy = MulticlassAccuracy(cfg.model.num_classes)
    count, loss_sum = 0, 0.0
    with torch.no_grad():
        for x, y in datamodule.val_dataloader():
            logits = model(x)
            accuracy.update(logits, y)
            loss_sum += torch.nn.functional.cross_entropy(logits, y, reduction="sum").item()
            count += len(y)
    assert count == n_val
    assert logged["val/acc"] == pytest.approx(float(accuracy.compute()), abs=1e-6)
    # The mean loss moves with any repeated sample (accuracy may not).
    assert logged["val/loss"] == pytest.approx(loss_sum / count, abs=1e-5)


def test_preflight_counts_no_image_in_a_classifiers_train_acc(tmp_path):
    """The preflight's batch goes through the run's own model: its train/acc stays empty."""
    from trainlab.checks.preflight import build_model, preflight

    cfg = compose_cfg(tmp_path, ["experiment=digits_classifier"])
    model = build_model(cfg)
    preflight(cfg, instantiate(cfg.data), model)
    assert model.train_acc.update_count == 0


@pytest.mark.parametrize("rule, factor", [("none", 1.0), ("linear", 4.0), ("sqrt", 2.0)])
def test_lr_scaling_multiplies_the_classifiers_rate(cfg_factory, rule, factor):
    from trainlab.run.batch import scale_learning_rates

    classifier = cfg_factory("experiment=digits_classifier", f"lr_scaling.rule={rule}")
    lr = classifier.model.optimizer.lr
    scale_learning_rates(classifier, global_batch_size=1024)  # reference 256
    assert classifier.model.optimizer.lr == pytest.approx(lr * factor)


def test_finetune_changes_what_it_inherits_from_linear_probe_to_a_model_given_by_hand():
    """finetune extends linear_probe: the values it inherits count among its changes."""
    from conftest import CONFIGS

    from trainlab.run.overrides import experiment_changes

    (line,) = experiment_changes(
        CONFIGS, {"experiment": "finetune", "model": "classifier"}, ["model=classifier"]
    )
    assert "model.layer_decay=0.75" in line and "model.net.freeze_encoder=False" in line
    given = ["model=classifier"]
    assert experiment_changes(CONFIGS, {"experiment": None, "model": "classifier"}, given) == []
    given = ["data.image_size=32"]
    assert experiment_changes(CONFIGS, {"experiment": "digits_classifier"}, given) == []
