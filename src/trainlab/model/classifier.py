"""Supervised image classification, also linear probing and fine-tuning of pre-trained
encoders (with ``networks.encoder_classifier.EncoderClassifier`` as the network)."""

from functools import partial
from typing import Annotated

import lightning as L
import torch
import torch.nn.functional as F
from annotated_types import Interval
from torch import nn
from torchmetrics import MaxMetric, MeanMetric
from torchmetrics.classification import MulticlassAccuracy
from torchvision.transforms import v2

from trainlab.model.epoch_mean import EpochMean
from trainlab.model.summary_input import summary_input
from trainlab.optim.fused import fused_by_default
from trainlab.optim.schedules import warmup_cosine, warmup_steps
from trainlab.utils.ranges import Count, NonNegative, PositiveFraction


def layer_decay_groups(
    module: nn.Module, layer_id, num_layers: int, layer_decay: float, prefix: str = ""
) -> list[dict]:
    """The split of optim/param_groups.py's ``decay_groups``, per depth, each group with
    ``lr_scale = layer_decay ** (num_layers - depth)``. ``layer_id(name)`` gives a parameter's
    depth in 0..num_layers (timm's ``group_matcher`` of the encoder: EncoderClassifier.layer_id).
    timm's ``param_groups_layer_decay`` does this for a timm model alone; the classifier here
    is an encoder and a head of its own."""
    groups: dict[tuple[int, bool], dict] = {}
    for name, param in module.named_parameters():
        if not param.requires_grad:
            continue
        depth, decay = layer_id(name), param.ndim > 1
        group = groups.setdefault(
            (depth, decay),
            {
                "params": [],
                "name": f"{prefix}layer{depth}_{'decay' if decay else 'no_decay'}",
                "lr_scale": layer_decay ** (num_layers - depth),
                "decay": decay,
                **({} if decay else {"weight_decay": 0.0}),
            },
        )
        group["params"].append(param)
    return [groups[key] for key in sorted(groups)]


class Classifier(L.LightningModule):
    """Cross-entropy on any network that maps images to logits.

    ``optimizer`` and ``scheduler`` are partials from the config (``_partial_: true``), so
    the module never parses config and any torch optimizer or scheduler plugs in.

    Args:
        label_smoothing: cross-entropy label smoothing.
        mixup_alpha / cutmix_alpha: torchvision.transforms.v2 MixUp / CutMix on training
            batches (one of the two per batch when both are on; 0 = off).
        layer_decay: < 1 gives each layer of the network its own learning rate,
            ``layer_decay ** (depth from the top)`` times the base rate; the network must
            have ``layer_id(name)`` (``EncoderClassifier`` has).
        warmup_epochs: > 0 uses linear warm-up then cosine decay to 0 per optimizer step
            (instead of ``scheduler``).
        init_from: a weights file for ``net.load_weights`` (pre-trained encoders).
    """

    monitor, monitor_mode = "val/acc", "max"  # optimized_metric unless the config says otherwise

    def __init__(
        self,
        net: nn.Module,
        num_classes: Count,
        optimizer,
        scheduler=None,
        label_smoothing: Annotated[float, Interval(ge=0, lt=1)] = 0.0,
        mixup_alpha: NonNegative = 0.0,
        cutmix_alpha: NonNegative = 0.0,
        layer_decay: PositiveFraction = 1.0,
        warmup_epochs: NonNegative = 0.0,
        init_from: str | None = None,
    ):
        super().__init__()
        # Plain values only, so the checkpoint loads with torch.load(weights_only=True).
        self.save_hyperparameters(logger=False, ignore=["net", "optimizer", "scheduler"])
        self.make_optimizer, self.make_scheduler = optimizer, scheduler
        self.net = net
        if init_from:
            net.load_weights(init_from)
        mixes = [
            mix(alpha=alpha, num_classes=num_classes)
            for mix, alpha in ((v2.MixUp, mixup_alpha), (v2.CutMix, cutmix_alpha))
            if alpha > 0
        ]
        self.mix = v2.RandomChoice(mixes) if mixes else None
        self.train_acc = MulticlassAccuracy(num_classes)
        self.val_acc = MulticlassAccuracy(num_classes)
        self.test_acc = MulticlassAccuracy(num_classes)
        top5 = partial(MulticlassAccuracy, num_classes, top_k=min(5, num_classes))
        self.val_acc_top5, self.test_acc_top5 = top5(), top5()
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()
        self.val_acc_best = MaxMetric()
        self.epoch_loss = EpochMean()  # train/loss, kept in the checkpoint

    def setup(self, stage: str) -> None:
        self.example_input_array = summary_input(self.trainer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        targets = y
        if self.mix is not None:
            x, targets = self.mix(x, y)  # soft targets (B, classes)
        logits = self(x)
        loss = F.cross_entropy(logits, targets, label_smoothing=self.hparams.label_smoothing)
        self.train_acc(logits, y)
        # No prog_bar: the bars read it themselves, without a host sync per step (callbacks/progress.py).
        # The step's loss is this rank's: Lightning syncs a value with a barrier first, a
        # host sync every step on GPUs. The epoch's mean is every rank's (model/epoch_mean.py).
        self.log("train/loss_step", loss, on_step=True, on_epoch=False)
        self.epoch_loss.add(loss)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
        return loss

    def _evaluate(self, batch, stage: str):
        x, y = batch
        logits = self(x)
        mean_loss = getattr(self, f"{stage}_loss")
        mean_loss(F.cross_entropy(logits, y), weight=len(y))
        self.log(f"{stage}/loss", mean_loss, on_epoch=True, prog_bar=True)
        for name in ("acc", "acc_top5"):
            metric = getattr(self, f"{stage}_{name}")
            metric(logits, y)
            self.log(f"{stage}/{name}", metric, on_epoch=True, prog_bar=name == "acc")

    def validation_step(self, batch, batch_idx):
        self._evaluate(batch, "val")

    def on_train_epoch_start(self) -> None:
        self.epoch_loss.start(self.current_epoch)

    def on_train_epoch_end(self) -> None:
        # Every rank holds the same mean: the sync averages equal values.
        self.log("train/loss", self.epoch_loss.mean(), on_epoch=True, sync_dist=True)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["epoch_loss"] = self.epoch_loss.state_dict()  # a mid-epoch resume goes on

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.epoch_loss.load_state_dict(checkpoint.get("epoch_loss"))

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.val_acc_best(self.val_acc.compute())
            # Equal on every rank (val_acc is synced): sync_dist only says so to Lightning.
            self.log("val/acc_best", self.val_acc_best.compute(), sync_dist=True)

    def test_step(self, batch, batch_idx):
        self._evaluate(batch, "test")

    def param_groups(self) -> list[dict] | list[nn.Parameter]:
        """Trainable parameters only: a frozen encoder gets no optimizer state at all."""
        if self.hparams.layer_decay < 1:
            num_layers = max(self.net.layer_id(n) for n, _ in self.net.named_parameters())
            return layer_decay_groups(
                self.net, self.net.layer_id, num_layers, self.hparams.layer_decay
            )
        return [p for p in self.parameters() if p.requires_grad]

    def configure_optimizers(self):
        groups = self.param_groups()
        optimizer = fused_by_default(self.make_optimizer)(params=groups)
        for group in optimizer.param_groups:
            group["lr"] *= group.get("lr_scale", 1.0)
        if self.hparams.warmup_epochs > 0:
            total = self.trainer.estimated_stepping_batches
            warmup = warmup_steps(self.hparams.warmup_epochs, total, self.trainer.max_epochs)
            schedule = partial(warmup_cosine, total=total, warmup=warmup, start=0, peak=1, final=0)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        elif self.make_scheduler is not None:
            scheduler = self.make_scheduler(optimizer=optimizer)
        else:
            return optimizer
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
