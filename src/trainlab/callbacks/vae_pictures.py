"""VAE pictures each validation epoch: inputs over their reconstructions, and prior samples."""

import torch
from lightning.pytorch.callbacks import Callback
from torchvision.utils import make_grid

from trainlab.callbacks.pictures import enlarge, publish
from trainlab.model.vae import EVAL_SEED
from trainlab.utils.ranges import Count


class VAEPictures(Callback):
    """pictures/reconstructions.png (row pairs: inputs as the model sees them, then their
    reconstructions) and pictures/samples.png (decoded z ~ N(0, I), fixed z every epoch)."""

    def __init__(self, num_images: Count = 16):
        self.num_images = num_images

    @torch.no_grad()
    def on_validation_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        dm = trainer.datamodule
        n = min(self.num_images, len(dm.val_set))
        per_row = min(8, n)
        n -= n % per_row
        images = torch.stack([dm.val_set[i][0] for i in range(n)]).to(pl_module.device)
        generator = torch.Generator(images.device).manual_seed(EVAL_SEED)
        x = pl_module.net.likelihood.prepare(images, generator=generator)
        recon = pl_module.reconstruct(x)
        # Rows alternate: inputs, then their reconstructions right below.
        pairs = torch.stack([x.unflatten(0, (-1, per_row)), recon.unflatten(0, (-1, per_row))], 1)
        grid = make_grid(enlarge(pairs.flatten(0, 2).clamp(0, 1).float().cpu()), nrow=per_row)
        publish(trainer, "val/reconstructions", grid, "reconstructions.png")
        samples = pl_module.sample(16, torch.Generator().manual_seed(EVAL_SEED)).float().cpu()
        publish(trainer, "val/samples", make_grid(enlarge(samples), nrow=8), "samples.png")
