"""DINO (Caron et al. 2021): self-distillation with no labels. A student (encoder and
projection head) matches, on every view, the teacher's sharpened and centred distribution
over prototypes on the other global views; the teacher is the student's EMA. Multi-crop:
``data.views`` lists the global views first (the teacher sees only those) and the smaller
local views after them."""

import torch

from trainlab.losses.dino import DINOLoss
from trainlab.model.self_supervised import SelfSupervised
from trainlab.networks.encoder import pooled_and_layers, pooled_width
from trainlab.networks.heads import ProjectionHead
from trainlab.networks.running_mean import RunningMean
from trainlab.networks.teacher import teacher_of
from trainlab.utils.ranges import Count, EmaSchedule, Momentum, NonNegative, Positive


class DINO(SelfSupervised):
    """``head`` is a partial of ``ProjectionHead``, completed with the encoder's width.
    ``global_views``: how many of the first views the teacher reads (the paper's 2).
    ``student_temp`` / ``teacher_temp``: the softmax temperatures; a teacher colder than the
    student sharpens. ``center_momentum``: the EMA of the teacher's mean output subtracted
    before its softmax (centring; with sharpening it keeps the outputs from collapsing to one
    prototype or to the uniform distribution). ``freeze_prototypes_epochs``: the prototype layer
    gets no update for that many first epochs. The monitors, the evaluation forward and weight
    export read the teacher (``evaluated``)."""

    trained = ("encoder", "head")
    evaluated = "target_encoder"

    def __init__(
        self,
        encoder: torch.nn.Module,
        head,
        global_views: Count = 2,
        student_temp: Positive = 0.1,
        teacher_temp: Positive = 0.04,
        center_momentum: Momentum = 0.9,
        freeze_prototypes_epochs: NonNegative = 1,
        ema: EmaSchedule = (0.996, 1.0),
        **base,
    ):
        super().__init__(encoder, ema=ema, **base)
        self.head: ProjectionHead = head(in_dim=pooled_width(encoder))
        self.target_encoder = teacher_of(encoder)
        self.target_head = teacher_of(self.head)
        self.center = RunningMean(self.head.prototypes.out_features, center_momentum)
        self.criterion = DINOLoss(student_temp, teacher_temp)
        self._teacher_batch: torch.Tensor | None = None  # for update_state, after the loss

    def ema_pairs(self):
        return [(self.target_encoder, self.encoder), (self.target_head, self.head)]

    def loss(self, views, generator: torch.Generator):
        g = self.hparams.global_views
        if not isinstance(views, list) or len(views) < max(2, g):
            got = len(views) if isinstance(views, list) else "no"
            raise ValueError(
                f"DINO reads {g} global views and any local ones, not {got}: give data.views "
                f"at least {max(2, g)} recipes, the global ones first"
            )
        with torch.no_grad():
            self.target_encoder.eval()
            # The first global view through the teacher once: its pooled output feeds the
            # head, its last layers the monitors (``monitored_features``: the evaluated
            # network is the teacher).
            first, layers = pooled_and_layers(self.target_encoder, views[0], self.monitored_blocks)
            features = torch.cat(layers, dim=1)
            pooled = [first, *(self.target_encoder(v) for v in views[1:g])]
            teacher = [self.target_head(p) for p in pooled]
            targets = self.criterion.targets(teacher, self.center.value)
        student = [self.head(self.encoder(v)) for v in views]
        loss = self.criterion(student, targets)
        if self.training:
            self._teacher_batch = torch.cat(teacher)
            entropy = -(targets[0] * targets[0].clamp_min(1e-12).log()).sum(-1).mean()
            self.log_numbers({"train/teacher_entropy": entropy.detach()})
        return loss, features

    def on_after_backward(self) -> None:
        # DINO's freeze_last_layer: the prototypes stay put for the first epochs, while the
        # rest of the student settles (the paper: training is unstable without it).
        if self.current_epoch < self.hparams.freeze_prototypes_epochs:
            for p in self.head.prototypes.parameters():
                p.grad = None

    def update_state(self) -> None:
        """The centre moves toward this step's teacher outputs, averaged over ranks."""
        if self._teacher_batch is not None:
            self.center.update(self._teacher_batch)
            self._teacher_batch = None

    def evaluate(self, images: torch.Tensor, generator: torch.Generator):
        return None, self.monitored_features(images)
