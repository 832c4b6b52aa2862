"""The I-JEPA training step through Lightning against a bare PyTorch loop, same model and batch.

Both run the same work per step: masks, target forward, context forward, predictor, loss,
AdamW with the per-step schedules, EMA update. Lightning's overhead is what is left.
"""

import statistics
import time

import lightning as L
from torch.utils.data import DataLoader, Dataset

from trainlab.models.masks import step_generator


class SameBatch(Dataset):
    """One batch repeated: the loader costs nothing, so only the step is timed."""

    def __init__(self, images, labels, steps):
        self.images, self.labels, self.steps = images, labels, steps

    def __len__(self):
        return self.steps

    def __getitem__(self, i):
        return self.images, self.labels


class StepTimer(L.Callback):
    def __init__(self, warmup):
        self.warmup, self.start, self.steps = warmup, None, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == self.warmup:
            self.start = time.perf_counter()

    def on_train_end(self, trainer, pl_module):
        self.seconds = time.perf_counter() - self.start


def lightning_rate(make_model, images, labels, steps, warmup) -> float:
    model = make_model()
    timer = StepTimer(warmup)
    loader = DataLoader(SameBatch(images, labels, steps + warmup), batch_size=None)
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
        limit_val_batches=0,
    )
    trainer.fit(model, train_dataloaders=loader)
    return steps * len(images) / timer.seconds


def bare_rate(make_model, images, labels, steps, warmup) -> float:
    model = make_model()
    model.train()
    optimizer = model.configure_optimizers()
    total = steps + warmup
    for step in range(total):
        if step == warmup:
            start = time.perf_counter()
        s = {"lr": 1e-3, "wd": 0.04, "ema": 0.996 + 0.004 * step / total}
        for group in optimizer.param_groups:
            if group.get("scheduled"):
                group["lr"] = s["lr"]
                if group["decay"]:
                    group["weight_decay"] = s["wd"]
        loss, features = model.loss(images, step_generator(0, 0, step))
        loss = loss + model.online.training_loss(features, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        model.update_target(s["ema"])
    return steps * len(images) / (time.perf_counter() - start)


def bench(make_model, images, labels, steps=15, warmup=3, repeats=3) -> dict:
    light, bare = [], []
    for _ in range(repeats):  # alternate, so drift on a shared machine hits both
        bare.append(bare_rate(make_model, images, labels, steps, warmup))
        light.append(lightning_rate(make_model, images, labels, steps, warmup))
    b, l_ = statistics.median(bare), statistics.median(light)
    return {"bare_samples_per_s": b, "lightning_samples_per_s": l_, "ratio": l_ / b}
