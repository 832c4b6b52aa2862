"""MAE pre-training (He et al. 2022): reconstruct the pixels of randomly masked patches."""

from functools import partial

import torch

from trainlab.losses.masked_pixels import MaskedPixelLoss
from trainlab.model.self_supervised import SelfSupervised
from trainlab.networks.mae import patchify, random_masks
from trainlab.networks.vit import ViTEncoder, gather_tokens, require_tokens
from trainlab.utils.ranges import OpenFraction


class MAE(SelfSupervised):
    """Encoder on the visible patches, ``decoder`` (a partial of ``PixelDecoder``) predicts
    the masked ones; mean squared error on their pixels, each patch standardised first when
    ``norm_pix_loss`` (the paper's default). Monitors, optimizer and schedules come from
    ``SelfSupervised``."""

    trained = ("encoder", "decoder")

    def __init__(
        self,
        encoder: ViTEncoder,
        decoder,
        mask_ratio: OpenFraction = 0.75,
        norm_pix_loss: bool = True,
        **base,
    ):
        require_tokens(encoder, "MAE")
        super().__init__(encoder, **base)
        self.patch = encoder.patch_embed.patch_size[0]
        self.decoder = decoder(
            grid=encoder.grid,
            embed_dim=encoder.embed_dim,
            patch_size=self.patch,
            in_chans=encoder.patch_embed.proj.in_channels,
        )
        self.masks = partial(random_masks, num_patches=encoder.num_patches, mask_ratio=mask_ratio)
        self.criterion = MaskedPixelLoss(norm_pix_loss)

    def loss(self, images: torch.Tensor, generator: torch.Generator):
        masks = self.masks(len(images), generator).to(images.device)
        context, targets = masks.context, masks.targets
        pred = self.decoder(self.encoder(images, context), context, targets)[:, 0]
        target = gather_tokens(patchify(images, self.patch), targets[:, 0])
        loss = self.criterion(pred, target)
        with torch.no_grad():  # the monitors see whole images, as the evaluation does
            features = self.monitored_features(images)
        return loss, features
