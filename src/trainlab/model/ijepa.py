"""I-JEPA pre-training (Assran et al. 2023): predict the target encoder's features of
masked blocks from a context block, in representation space. The paper's method; the
regularisers the recipe searches added at laptop scale are a subclass
(model/ijepa_regularised.py).
"""

from typing import Literal

import torch

from trainlab.losses.feature_regression import FeatureRegressionLoss
from trainlab.model.self_supervised import SelfSupervised
from trainlab.networks.flops import blocks_flops, patch_embed_flops
from trainlab.networks.multiblock_masks import MultiBlockMaskGenerator
from trainlab.networks.predictor import Predictor
from trainlab.networks.target_norm import TARGET_NORMS
from trainlab.networks.teacher import teacher_of
from trainlab.networks.vit import ViTEncoder, gather_tokens, require_tokens
from trainlab.networks.weights import load_into, network_parts, read_state
from trainlab.utils.logging import get_logger
from trainlab.utils.ranges import Count, EmaSchedule

log = get_logger(__name__)


class IJEPA(SelfSupervised):
    """Context encoder + predictor trained by AdamW; target encoder = EMA of the encoder.

    ``predictor`` and ``masks`` are partials from the config; the module completes them with
    the encoder's grid and width. Schedules, monitors and the EMA step come from
    ``SelfSupervised``.

    The target encoder is a registered submodule (so it is checkpointed) whose parameters
    never require grad: DDP neither all-reduces nor wraps anything of it, and since the
    encoder weights are identical on every rank, so are its EMA updates.
    """

    trained = ("encoder", "predictor")
    #: The paper evaluates the EMA target encoder.
    evaluated = "target_encoder"

    def __init__(
        self,
        encoder: ViTEncoder,
        predictor,
        masks,
        loss: Literal["smooth_l1", "l1", "l2"] = "smooth_l1",
        target_layers: Count = 1,
        target_norm: Literal["layer", "channel", "none"] = "layer",
        init_from: str | None = None,
        ema: EmaSchedule = (0.996, 1.0),
        **base,
    ):
        # Built before the base's online probe: the order of random initialisations is part
        # of ijepa_digits' recorded numbers (tests/fixtures/ijepa_digits_trace/).
        require_tokens(encoder, "I-JEPA")
        predictor = predictor(grid=encoder.grid, embed_dim=encoder.embed_dim)
        super().__init__(encoder, ema=ema, **base)
        self.predictor: Predictor = predictor
        self.masks: MultiBlockMaskGenerator = masks(grid=encoder.grid)
        self.target_encoder = teacher_of(encoder)
        self.criterion = FeatureRegressionLoss(loss)
        self.target_norm = TARGET_NORMS[target_norm]
        if init_from:
            self.load_weights(init_from)

    def load_weights(self, path: str) -> None:
        """Start from an official I-JEPA, timm ``*_ijepa`` or trainlab checkpoint."""
        state = read_state(path)
        parts = network_parts(state)
        for name, part in parts.items():
            if name != "evaluated":
                load_into(getattr(self, name), part, name)
        if "predictor" in parts and "state_dict" not in state:
            # An official checkpoint records no config, and the head count changes no
            # weight's shape: say what was assumed, and what the official code builds.
            heads = self.predictor.blocks[0].attn.num_heads
            official = self.encoder.blocks[0].attn.num_heads
            line = (
                f"model.init_from: {path} records no predictor heads; loaded with "
                f"model.predictor.num_heads={heads} (the official code uses the encoder's: "
                f"{official})"
            )
            (log.info if heads == official else log.warning)(line)

    def train(self, mode: bool = True):
        """The target encoder always runs as in evaluation, so stochastic depth
        (``encoder.drop_path_rate``) regularises the context encoder, never the targets."""
        super().train(mode)
        self.target_encoder.eval()
        return self

    def ema_pairs(self):
        return [(self.target_encoder, self.encoder)]

    def targets(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the monitors' features (B, monitored_blocks * D), the regression target (B, N, D)),
        from one forward of the target encoder.

        The target is the layer-normed output (the paper), or with ``target_layers`` K > 1 the
        mean of the last K blocks' layer-normed outputs, as data2vec builds its targets. The
        features are the average-pooled outputs of the last blocks after the final norm.
        """
        k, m = self.hparams.target_layers, self.monitored_blocks
        layers = self.target_encoder.forward_intermediates(
            images, indices=max(k, m), norm=False, intermediates_only=True, output_fmt="NLC"
        )
        normed = [self.target_encoder.norm(x) for x in layers[-m:]]
        features = torch.cat([x.mean(dim=1) for x in normed], dim=1)
        if k == 1:
            return features, self.target_norm(normed[-1])
        target = torch.stack([self.target_norm(x) for x in layers[-k:]])
        return features, target.mean(dim=0)

    def loss(self, images: torch.Tensor, generator: torch.Generator):
        masks = self.masks(len(images), generator).to(images.device)
        context, targets = masks.context, masks.targets
        with torch.no_grad():
            features, target = self.targets(images)
            num_tokens = target.shape[1]
            target = gather_tokens(target, targets)
        ctx = self.encoder(self.context_view(images, generator), context)
        pred = self.predictor(ctx, context, targets)
        loss = self.criterion(pred, target) + self.regularisers(ctx, features, generator)
        if self.training:
            self.log_numbers(
                {"train/ctx_tokens": float(context.shape[1]), "train/tgt_tokens": float(targets[0].numel())}
            )  # fmt: skip
            self.count_work(len(images), num_tokens, context.shape[1], *targets.shape[1:])
        return loss, features

    # -- where a variant of the method changes it (model/ijepa_regularised.py) -------------
    def context_view(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """What the context encoder sees: in the paper, the image the targets come from."""
        return images

    def regularisers(self, ctx: torch.Tensor, features: torch.Tensor, generator) -> float:
        """Terms added to the loss on the context tokens ``ctx`` and the target encoder's
        pooled ``features``: the paper has none."""
        return 0.0

    def count_work(self, batch: int, n: int, k: int, m: int, t: int) -> None:
        """Tokens and FLOPs of this training step, read by the throughput part (tokens/s,
        MFU): the target encoder's forward on all n tokens, the context encoder's forward and
        backward (x3) on the k context tokens (its patch embedding on all n), and the
        predictor's on m sequences of k + t (its last block's queries, projection and MLP on
        the t target rows alone)."""
        self.step_tokens = batch * (n + k + m * (k + t))
        last_queries = None if self.predictor.all_rows_in_last_block else t
        self.step_flops = batch * (
            4 * n * patch_embed_flops(self.encoder.patch_embed)  # both encoders embed all n
            + blocks_flops(self.target_encoder.blocks, n)
            + 3 * blocks_flops(self.encoder.blocks, k)
            + 3 * m * blocks_flops(self.predictor.blocks, k + t, last_queries)
        )
