"""Downstream evaluation: linear probe, fine-tuning with layer-wise LR decay, low-shot subsets."""

from collections import Counter
from functools import partial

import lightning as L
import pytest
import torch
from conftest import compose_cfg
from hydra.utils import instantiate
from torch.utils.data import DataLoader, TensorDataset

from trainlab.data.low_shot import class_balanced_subset, labels_of
from trainlab.model.classifier import Classifier
from trainlab.networks.encoder_classifier import EncoderClassifier
from trainlab.networks.vit import ViTEncoder
from trainlab.utils.errors import DataError

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


def test_low_shot_subset_is_class_balanced_reproducible_and_at_least_one_batch(cfg_factory):
    datamodule = instantiate(cfg_factory("experiment=linear_probe").data)
    train, _, _ = datamodule.build_splits()
    labels = labels_of(train)
    subset = class_balanced_subset(train, 0.1, seed=0)
    counts, full = Counter(labels_of(subset).tolist()), Counter(labels.tolist())
    assert set(counts) == set(full)
    for label, n in full.items():
        assert counts[label] == max(1, round(n * 0.1)), label
    assert subset.indices == class_balanced_subset(train, 0.1, seed=0).indices
    assert subset.indices != class_balanced_subset(train, 0.1, seed=1).indices
    # Through the config, as users ask for it.
    dm = instantiate(cfg_factory("experiment=linear_probe", "data.train_fraction=0.01").data)
    dm.setup("fit")
    assert len(Counter(labels_of(dm.train_set.dataset).tolist())) == 10
    assert len(dm.train_set) < 0.02 * len(labels)
    # Fewer images than one batch: the loader drops incomplete batches, so no step would run
    # and the run would test an untrained model. A clear error instead.
    assert len(dm.train_set) < dm.batch_size
    with pytest.raises(DataError, match="fewer than data.batch_size"):
        dm.train_dataloader()


# Under DDP the probe's val/acc equals the whole validation set's: test_distributed.py.


def test_probe_takes_the_encoder_shape_from_the_checkpoints_run(tmp_path):
    """experiment=linear_probe on a vicreg_mnist checkpoint: patch 7 at 28 px, not the
    experiment's patch 4 at 16 px; what the command line gives still wins."""
    from omegaconf import OmegaConf

    from trainlab.run.checkpoint_config import adopt_checkpoint_shape

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
