"""I-JEPA pre-training (Assran et al. 2023): predict the target encoder's features of
masked blocks from a context block, in representation space.
"""

import copy
from typing import Literal

import lightning as L
import torch
import torch.nn.functional as F

from trainlab.models.masks import MultiBlockMaskGenerator, step_generator
from trainlab.models.online_eval import OnlineEvaluator
from trainlab.models.predictor import Predictor
from trainlab.models.vit import ViTEncoder, gather_tokens
from trainlab.models.weights import ijepa_parts, load_into, read_state
from trainlab.optim.param_groups import decay_groups
from trainlab.optim.schedules import cosine, linear, warmup_cosine

LOSSES = {"smooth_l1": F.smooth_l1_loss, "l1": F.l1_loss, "l2": F.mse_loss}


class IJEPA(L.LightningModule):
    """Context encoder + predictor trained by AdamW; target encoder = EMA of the encoder.

    ``predictor``, ``masks`` and ``optimizer`` are partials from the config; the module
    completes them with the encoder's grid and width. LR, weight decay and EMA momentum
    follow per-optimizer-step schedules over ``trainer.estimated_stepping_batches``, so
    devices, nodes and gradient accumulation are all accounted for.

    The target encoder is a registered submodule (so it is checkpointed) whose parameters
    never require grad: DDP neither all-reduces nor wraps anything of it, and since the
    encoder weights are identical on every rank, so are its EMA updates.
    """

    def __init__(
        self,
        encoder: ViTEncoder,
        predictor,
        masks,
        optimizer,
        num_classes: int,
        lr: tuple = (2e-4, 1e-3, 1e-6),
        warmup_epochs: float = 40,
        weight_decay: tuple = (0.04, 0.4),
        ema: tuple = (0.996, 1.0),
        loss: Literal["smooth_l1", "l1", "l2"] = "smooth_l1",
        probe_lr: float = 1e-3,
        knn_k: int = 20,
        bank_size: int = 4096,
        init_from: str | None = None,
        seed: int = 0,
    ):
        super().__init__()
        # Only plain values go into the checkpoint, so it loads with torch.load(weights_only=True);
        # the modules and the optimizer partial are rebuilt from the config.
        self.save_hyperparameters(
            logger=False, ignore=["encoder", "predictor", "masks", "optimizer"]
        )
        self.make_optimizer = optimizer
        self.encoder = encoder
        self.predictor: Predictor = predictor(grid=encoder.grid, embed_dim=encoder.embed_dim)
        self.masks: MultiBlockMaskGenerator = masks(grid=encoder.grid)
        self.target_encoder = copy.deepcopy(encoder).requires_grad_(False)
        self.online = OnlineEvaluator(
            encoder.embed_dim, num_classes, knn_k=knn_k, bank_size=bank_size
        )
        self.loss_fn = LOSSES[loss]
        if init_from:
            self.load_weights(init_from)

    def load_weights(self, path: str) -> None:
        """Start from an official I-JEPA, timm ``*_ijepa`` or trainlab checkpoint."""
        for name, state in ijepa_parts(read_state(path)).items():
            load_into(getattr(self, name), state, name)

    # -- the I-JEPA objective ------------------------------------------------------------
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """The evaluation representation: the target encoder's average-pooled features."""
        return self.target_encoder.pooled(images)

    def jepa_loss(self, images: torch.Tensor, generator: torch.Generator):
        masks = self.masks(len(images), generator)
        context, targets = masks.context.to(self.device), masks.targets.to(self.device)
        with torch.no_grad():
            full = self.target_encoder(images)  # (B, N, D)
            target = gather_tokens(F.layer_norm(full, full.shape[-1:]), targets)
        pred = self.predictor(self.encoder(images, context), context, targets)
        # In float32 even under bf16 autocast: the loss is a small difference of features.
        loss = self.loss_fn(pred.float(), target.float())
        return loss, full.mean(dim=1), masks

    def training_step(self, batch, batch_idx):
        images, labels = batch
        # Masks depend on (seed, epoch, batch) only: same on every rank, worker count and resume.
        g = step_generator(self.hparams.seed, self.current_epoch, batch_idx)
        loss, features, masks = self.jepa_loss(images, g)
        probe_loss = self.online.training_loss(features, labels)
        # One bank for the whole job: every rank enqueues every rank's features.
        gathered = self.all_gather(features.detach()).reshape(-1, features.shape[-1])
        self.online.enqueue(gathered, self.all_gather(labels).reshape(-1))
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        self.log("train/probe_loss", probe_loss, on_step=False, on_epoch=True)
        self.log_dict(
            {
                "train/ctx_tokens": float(masks.context.shape[1]),
                "train/tgt_tokens": float(masks.targets[0].numel()),
            },
            on_step=True,
        )
        return loss + probe_loss

    def _evaluate(self, batch, batch_idx, stage: str):
        images, labels = batch
        # Fixed masks per batch index, so the loss is comparable across epochs.
        loss, features, _ = self.jepa_loss(images, step_generator(self.hparams.seed, -1, batch_idx))
        self.log(f"{stage}/loss", loss, on_epoch=True, prog_bar=True, sync_dist=True)
        self.online.update(features, labels)

    def _log_online(self, stage: str) -> None:
        self.log(f"{stage}/probe_acc", self.online.probe_acc, prog_bar=True)
        if self.online.knn_acc.update_called:  # the bank is empty before the first train step
            self.log(f"{stage}/knn_acc", self.online.knn_acc)
        seen = self.online.take_seen()
        if seen is not None:
            # Ranks may hold one sample more or less (evaluation is not padded); all_gather
            # needs equal shapes, so every rank contributes the smallest count.
            n = int(self.all_gather(torch.tensor(len(seen), device=seen.device)).min())
            gathered = self.all_gather(seen[:n]).reshape(-1, seen.shape[-1])
            for name, value in self.online.collapse_stats(gathered).items():
                self.log(f"{stage}/{name}", value)

    def validation_step(self, batch, batch_idx):
        self._evaluate(batch, batch_idx, "val")

    def on_validation_epoch_end(self):
        self._log_online("val")

    def test_step(self, batch, batch_idx):
        self._evaluate(batch, batch_idx, "test")

    def on_test_epoch_end(self):
        self._log_online("test")

    # -- optimisation --------------------------------------------------------------------
    def configure_optimizers(self):
        groups = decay_groups(self.encoder, "encoder/") + decay_groups(self.predictor, "predictor/")
        for group in groups:
            group["scheduled"] = True
        groups.append(
            {
                "params": list(self.online.probe.parameters()),
                "name": "probe",
                "lr": self.hparams.probe_lr,
                "weight_decay": 0.0,
                "scheduled": False,
            }
        )
        return self.make_optimizer(params=groups)

    def _schedules(self, step: int) -> dict[str, float]:
        total = max(1, int(self.trainer.estimated_stepping_batches))
        steps_per_epoch = total / max(1, self.trainer.max_epochs or 1)
        warmup = int(self.hparams.warmup_epochs * steps_per_epoch)
        (lr0, lr_peak, lr_end), (wd0, wd_end), (m0, m_end) = (
            self.hparams.lr,
            self.hparams.weight_decay,
            self.hparams.ema,
        )
        return {
            "lr": warmup_cosine(step, total, warmup, lr0, lr_peak, lr_end),
            "wd": cosine(step, total, wd0, wd_end),
            "ema": linear(step, total, m0, m_end),
        }

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        # Called once per optimizer step (not per micro-batch under accumulation).
        s = self._schedules(self.global_step)
        for group in optimizer.param_groups:
            if group.get("scheduled"):
                group["lr"] = s["lr"]
                if group["decay"]:
                    group["weight_decay"] = s["wd"]
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        self.update_target(s["ema"])
        self.log_dict({"train/lr": s["lr"], "train/wd": s["wd"], "train/ema_momentum": s["ema"]})

    @torch.no_grad()
    def update_target(self, momentum: float) -> None:
        """target <- momentum * target + (1 - momentum) * encoder, as one fused foreach op."""
        target = [p for p in self.target_encoder.parameters() if p.dtype.is_floating_point]
        online = [p for p in self.encoder.parameters() if p.dtype.is_floating_point]
        torch._foreach_lerp_(target, online, 1.0 - momentum)
