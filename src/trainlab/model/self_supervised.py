"""What every self-supervised method shares, so that a new one writes only its networks and
one ``loss(images, generator) -> (loss, features)``.

The base owns:
- the online monitors (linear probe and kNN fitted on a bank of training features gathered
  over ranks, collapse statistics) on the detached ``features`` the loss returns
  (evaluation/online.py);
- one AdamW over the ``trained`` networks (weight decay on matrices only);
- per-optimizer-step LR, weight-decay and (optionally) EMA-momentum schedules;
- the EMA of target networks (``ema_pairs``) after every optimizer step;
- the random generator of each step, a function of (run seed, epoch, batch) only, so masks
  are the same on every rank, worker count and resume; evaluation uses epoch -1 (fixed masks).

Conventions the rest of the template relies on:
- ``encoder``: any encoder of timm's contract (networks/encoder.py): a timm model or the
  project's ViT, read only through that contract;
- ``evaluated``: the network that the monitors, the evaluation forward, the end-of-run table,
  eval.py, export, the probe and fine-tuning read (saved in every checkpoint);
- ``forward(images)`` returns the pooled evaluation features;
- ``loss`` returns as ``features`` the average-pooled outputs of the last
  ``monitored_blocks`` stages or blocks, concatenated (``pooled_layers``): the frozen
  protocol's ``last4`` view, the one its linear probe chooses, so the monitors agree with it;
- buffers: DDP broadcasts only a per-rank BatchNorm's running statistics; every other buffer
  (the method's own state, a centre or a queue) is made equal on every rank by the module
  that moves it, and the rank consistency callback compares them all at every validation;
- for masked methods, a ``masks`` generator of ``(batch_size, generator)``: the mask picture
  draws it with the run's seed (``run_seed()``, the one way a seed reaches a module);
- attribute names ``encoder`` / ``target_encoder`` / ``predictor``: networks/weights.py maps
  checkpoints by these prefixes.
"""

import inspect
from typing import Literal

import lightning as L
import torch
from lightning.pytorch.utilities.parsing import collect_init_args
from torchmetrics.utilities.distributed import gather_all_tensors

from trainlab.evaluation.online import OnlineEvaluator
from trainlab.model.epoch_mean import EpochMean
from trainlab.model.summary_input import summary_input
from trainlab.networks.encoder import layer_widths, pooled_layers, probe_layers
from trainlab.networks.global_batch_norm import GLOBAL, PER_RANK
from trainlab.optim.fused import fused_by_default
from trainlab.optim.param_groups import decay_groups
from trainlab.optim.schedules import cosine, linear, peak_lr, warmup_cosine, warmup_steps
from trainlab.utils import lightning_internals, torch_internals
from trainlab.utils.ddp_buffers import keep_out_of_buffer_broadcast
from trainlab.utils.ranges import (
    Count,
    DecaySchedule,
    EmaSchedule,
    NonNegative,
    ScheduleScale,
)
from trainlab.utils.seeding import run_seed, step_generator


class SelfSupervised(L.LightningModule):
    """Args (all from the config). A method names only its own arguments and passes the rest
    through: ``def __init__(self, encoder, head, temp=0.1, **base)`` then
    ``super().__init__(encoder, **base)``; these are keyword-only, so the config's keys reach
    them by name (and preflight checks them against the annotations below):
    encoder: the ViT whose features are monitored and exported.
    optimizer: partial of a torch optimizer, completed with the parameter groups.
    num_classes: for the online probe and kNN only (labels never reach the loss); None: the
        data has no labels, and the monitors that need none run alone.
    start_lr, final_lr: the learning rate's warm-up start and cosine end per optimizer step;
    its peak is the optimizer's own ``lr`` (model.optimizer.lr); neither may exceed it;
    warmup_epochs: the warm-up.
    weight_decay: (start, end), cosine, on weight matrices only.
    ema: (start, end) momentum of the targets in ``ema_pairs``; None: no EMA.
    ema_shape: how the momentum goes from start to end: linear (I-JEPA) or cosine (DINO).
    schedule_scale: the LR, weight-decay and EMA schedules span this many times the run's
        steps, so a run with a scale above 1 stops before they reach their ends (the official
        I-JEPA code's ``ipe_scale``); the warm-up keeps its length in epochs.
    probe_weight_decay / knn_k / bank_size: the online monitors.
    """

    #: Attributes the optimizer trains (each gets ``<name>/decay`` and ``<name>/no_decay``).
    trained: tuple[str, ...] = ("encoder",)
    #: What checkpoints monitor and sweeps optimise unless the config says otherwise; on data
    #: without labels, RankMe (Garrido et al. 2023: it ranks runs as a probe does, unlabelled).
    monitor, monitor_mode = "val/probe_acc", "max"
    unlabelled_monitor, unlabelled_monitor_mode = "val/rankme", "max"
    #: The network the monitors and the evaluation forward read: a teacher method names its
    #: teacher ("target_encoder", the name weight export, eval.py and the end-of-run table
    #: read first).
    evaluated: str = "encoder"
    #: How a target network's buffers (BatchNorm's running statistics) follow its online
    #: network after every optimizer step: ``copy`` them, or ``average`` them with the EMA.
    target_buffers: Literal["copy", "average"] = "copy"

    def __init__(
        self,
        encoder: torch.nn.Module,
        *,
        optimizer,
        num_classes: Count | None,
        start_lr: NonNegative = 2e-4,
        final_lr: NonNegative = 1e-6,
        warmup_epochs: NonNegative = 40,
        weight_decay: DecaySchedule = (0.04, 0.4),
        ema: EmaSchedule | None = None,
        ema_shape: Literal["linear", "cosine"] = "linear",
        probe_weight_decay: NonNegative = 1e-5,
        knn_k: Count = 20,
        bank_size: Count = 4096,
        schedule_scale: ScheduleScale = 1.0,
    ):
        super().__init__()
        # Every constructor's arguments (Lightning walks the __init__ frames, the subclass's
        # too) but the networks and partials: the checkpoint then holds plain values only and
        # loads with torch.load(weights_only=True).
        frames = collect_init_args(inspect.currentframe(), [], classes=(L.LightningModule,))
        built = [k for args in frames for k, v in args.items() if callable(v)]
        self.save_hyperparameters(logger=False, ignore=built)
        self.make_optimizer = optimizer
        self.epoch_loss = EpochMean()  # train/loss, kept in the checkpoint
        #: The schedule's peak: the optimizer's own lr (model.optimizer.lr).
        self.peak_lr = peak_lr(optimizer)
        self.encoder = encoder
        #: How many last stages or blocks the monitors' features pool (the protocol's last4).
        self.monitored_blocks = probe_layers(encoder)
        self.online = OnlineEvaluator(
            sum(layer_widths(encoder, self.monitored_blocks)),
            num_classes,
            knn_k=knn_k,
            bank_size=bank_size,
            probe_weight_decay=probe_weight_decay,
        )

    # -- what a method defines -----------------------------------------------------------
    def loss(self, images, generator: torch.Generator):
        """(loss, features (B, monitored_blocks * D)): the objective, and per-image features
        for the monitors (see the conventions above). ``images`` is a batch (B, C, H, W), or
        with ``data.views`` a list of views, one batch each."""
        raise NotImplementedError

    def evaluate(self, images: torch.Tensor, generator: torch.Generator):
        """(val/test loss or None, features) on a batch of single images: the loss itself
        for methods that read one image; a view method returns (None, its features)."""
        return self.loss(images, generator)

    def update_state(self) -> None:
        """State a training step moves besides the weights (a centre, a queue): training_step
        calls it after ``loss``; the others that call ``loss`` (the memory estimate, preflight,
        validation through ``evaluate``) do not, so a start or a resume leaves it where it
        was. ``loss`` itself must not change state."""

    def monitored_features(self, images: torch.Tensor) -> torch.Tensor:
        """The monitors' features of a batch (B, monitored_blocks * D): the last blocks of the
        evaluated network, average-pooled and concatenated."""
        network = getattr(self, self.evaluated)
        return torch.cat(pooled_layers(network, images, self.monitored_blocks), dim=1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """The evaluation representation: average-pooled features of the evaluated network."""
        return getattr(self, self.evaluated)(images)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # Which network export, eval.py, the probe and fine-tuning read, without the class.
        checkpoint["evaluated"] = self.evaluated
        checkpoint["epoch_loss"] = self.epoch_loss.state_dict()  # a mid-epoch resume goes on

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.epoch_loss.load_state_dict(checkpoint.get("epoch_loss"))

    def on_train_epoch_start(self) -> None:
        self.epoch_loss.start(self.current_epoch)

    def on_train_epoch_end(self) -> None:
        # Every rank holds the same mean: the sync averages equal values.
        self.log("train/loss", self.epoch_loss.mean(), on_epoch=True, sync_dist=True)

    def equal_on_every_rank(self) -> list[str]:
        """Every buffer but a per-rank BatchNorm's running statistics: the method's own state
        (a centre, a queue: equal because the module that moves it makes it so), the
        monitors' bank (each rank enqueues every rank's gathered features), constants, and
        BatchNorm statistics of the global batch. DDP would broadcast them from rank 0 before
        every forward (broadcast_buffers, on by default for per-rank BatchNorm): 335 MB a
        step for the bank at experiment=ijepa."""
        per_rank = {
            f"{prefix}.{name}" if prefix else name
            for prefix, module in self.named_modules()
            if isinstance(module, PER_RANK) and not isinstance(module, GLOBAL)
            for name, _ in module.named_buffers(recurse=False)
        }
        return [name for name, _ in self.named_buffers() if name not in per_rank]

    def ema_pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        """(target, online) networks: target <- EMA of online after every optimizer step."""
        return []

    def setup(self, stage: str) -> None:
        self.example_input_array = summary_input(self.trainer)
        keep_out_of_buffer_broadcast(self, self.equal_on_every_rank())

    # -- steps -----------------------------------------------------------------------------
    def step_generator(self, batch_idx: int) -> torch.Generator:
        """This training step's random numbers (masks): the same on every rank."""
        return step_generator(run_seed(), self.current_epoch, batch_idx)

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss, features = self.loss(images, self.step_generator(batch_idx))
        self.update_state()
        # One bank for the whole job: every rank enqueues every rank's features.
        gathered = self.all_gather(features.detach()).reshape(-1, features.shape[-1])
        self.online.enqueue(gathered, self.all_gather(labels).reshape(-1))
        # No prog_bar: the bars read it themselves, without a host sync per step (callbacks/progress.py).
        # The step's loss is this rank's: Lightning syncs a value with a barrier first, a
        # host sync every step on GPUs. The epoch's mean is every rank's (model/epoch_mean.py).
        self.log("train/loss_step", loss, on_step=True, on_epoch=False)
        self.epoch_loss.add(loss)
        return loss

    def _evaluate(self, batch, batch_idx, stage: str):
        images, labels = batch
        # Fixed masks per batch index, so the loss is comparable across epochs.
        loss, features = self.evaluate(images, step_generator(run_seed(), -1, batch_idx))
        if loss is not None:
            self.log(f"{stage}/loss", loss, on_epoch=True, prog_bar=True, sync_dist=True)
        self.online.update(features, labels)

    def _log_online(self, stage: str) -> None:
        accuracy = self.online.probe_acc  # None without labels; before the first step unused
        if accuracy is not None and accuracy.update_called:
            self.log(f"{stage}/probe_acc", self.online.probe_acc, prog_bar=True)
            self.log(f"{stage}/knn_acc", self.online.knn_acc)
        seen = self.online.take_seen()
        if seen is not None:
            # Ranks may hold one sample more or less (evaluation is not padded): torchmetrics'
            # gather pads to the largest count and keeps each rank's own rows, every image.
            gathered = torch.cat(gather_all_tensors(seen)) if self.trainer.world_size > 1 else seen
            # RankMe and feat_std of the embedding itself: the last block's part of the view.
            width = layer_widths(getattr(self, self.evaluated), 1)[0]
            embedding = gathered[:, -width:]
            for name, value in self.online.collapse_stats(embedding).items():
                # Equal on every rank (gathered features): sync_dist only says so to Lightning.
                self.log(f"{stage}/{name}", value, sync_dist=True)

    def on_validation_epoch_start(self):
        self.online.fit()

    def validation_step(self, batch, batch_idx):
        self._evaluate(batch, batch_idx, "val")

    def on_validation_epoch_end(self):
        self._log_online("val")

    def on_test_epoch_start(self):
        self.online.fit()

    def test_step(self, batch, batch_idx):
        self._evaluate(batch, batch_idx, "test")

    def on_test_epoch_end(self):
        self._log_online("test")

    # -- optimisation ------------------------------------------------------------------------
    def configure_optimizers(self):
        groups = []
        for name in self.trained:
            groups += decay_groups(getattr(self, name), f"{name}/")
        return fused_by_default(self.make_optimizer)(params=groups)

    def schedules(self, step: int) -> dict[str, float]:
        """LR, weight decay and EMA momentum at optimizer step ``step`` of the whole run
        (``trainer.estimated_stepping_batches`` counts devices, nodes and accumulation)."""
        run_steps = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = warmup_steps(self.hparams.warmup_epochs, run_steps, self.trainer.max_epochs)
        total = int(run_steps * self.hparams.schedule_scale)
        wd0, wd_end = self.hparams.weight_decay
        lr0, lr_end = self.hparams.start_lr, self.hparams.final_lr
        out = {
            "lr": warmup_cosine(step, total, warmup, lr0, self.peak_lr, lr_end),
            "wd": cosine(step, total, wd0, wd_end),
        }
        if self.hparams.ema is not None:
            shape = {"linear": linear, "cosine": cosine}[self.hparams.ema_shape]
            out["ema"] = shape(step, total, *self.hparams.ema)
        return out

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        # Called once per optimizer step (not per micro-batch under accumulation).
        s = self.schedules(self.global_step)
        for group in optimizer.param_groups:
            group["lr"] = s["lr"]
            if group["decay"]:
                group["weight_decay"] = s["wd"]
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        if "ema" in s:
            self.update_target(s["ema"])
        names = {"lr": "train/lr", "wd": "train/wd", "ema": "train/ema_momentum"}
        self.log_numbers({names[k]: v for k, v in s.items()})

    def log_numbers(self, values: dict[str, float]) -> None:
        """Per-step Python numbers, logged only at the steps whose metrics Lightning writes
        (trainer.log_every_n_steps): self.log copies a number to the module's device, and on
        a GPU that blocking copy waits for every kernel queued so far (torch's copy code), a
        host sync per step."""
        trainer = lightning_internals.attached_trainer(self)  # None in a bare loop
        if trainer is not None and lightning_internals.should_update_logs(trainer):
            self.log_dict(values)

    @torch.no_grad()
    def update_target(self, momentum: float) -> None:
        """target <- momentum * target + (1 - momentum) * online, as one fused foreach op."""
        for target_net, online_net in self.ema_pairs():
            target = [p for p in target_net.parameters() if p.dtype.is_floating_point]
            online = [p for p in online_net.parameters() if p.dtype.is_floating_point]
            torch_internals.lerp_all_(target, online, 1.0 - momentum)
            # A teacher runs in eval mode, so its BatchNorm never moves its own statistics.
            for t, o in zip(target_net.buffers(), online_net.buffers(), strict=True):
                if self.target_buffers == "average" and t.dtype.is_floating_point:
                    t.lerp_(o, 1.0 - momentum)
                else:
                    t.copy_(o)
