"""Supervised image classification: the template's simplest LightningModule."""

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MaxMetric, MeanMetric
from torchmetrics.classification import MulticlassAccuracy


class Classifier(L.LightningModule):
    """Cross-entropy on any backbone that maps images to logits.

    ``optimizer`` and ``scheduler`` are partials from the config (``_partial_: true``), so
    the module never parses config and any torch optimizer or scheduler plugs in.
    """

    def __init__(self, net: nn.Module, num_classes: int, optimizer, scheduler=None):
        super().__init__()
        # Plain values only, so the checkpoint loads with torch.load(weights_only=True).
        self.save_hyperparameters(logger=False, ignore=["net", "optimizer", "scheduler"])
        self.make_optimizer, self.make_scheduler = optimizer, scheduler
        self.net = net
        self.train_acc = MulticlassAccuracy(num_classes)
        self.val_acc = MulticlassAccuracy(num_classes)
        self.test_acc = MulticlassAccuracy(num_classes)
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()
        self.val_acc_best = MaxMetric()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.train_acc(logits, y)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
        return loss

    def _evaluate(self, batch, stage: str, acc, mean_loss):
        x, y = batch
        logits = self(x)
        mean_loss(F.cross_entropy(logits, y), weight=len(y))
        acc(logits, y)
        self.log(f"{stage}/loss", mean_loss, on_epoch=True, prog_bar=True)
        self.log(f"{stage}/acc", acc, on_epoch=True, prog_bar=True)

    def validation_step(self, batch, batch_idx):
        self._evaluate(batch, "val", self.val_acc, self.val_loss)

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.val_acc_best(self.val_acc.compute())
            self.log("val/acc_best", self.val_acc_best.compute())

    def test_step(self, batch, batch_idx):
        self._evaluate(batch, "test", self.test_acc, self.test_loss)

    def configure_optimizers(self):
        optimizer = self.make_optimizer(params=self.parameters())
        if self.make_scheduler is None:
            return optimizer
        scheduler = self.make_scheduler(optimizer=optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
