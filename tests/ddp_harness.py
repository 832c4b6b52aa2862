"""Several DDP checks inside one 2-process gloo job, so start-up is paid once.

``python tests/ddp_harness.py OUT_DIR``: Lightning's launcher starts rank 1 by re-running
this script; every Trainer after the first reuses the two processes. Each rank writes
what it saw to OUT_DIR/rank<N>.json; tests/test_distributed.py asserts on it. Parts' harnesses
(FSDP's) import its models and helpers: the checks run only as a script.
"""

import json
import sys
from itertools import pairwise
from pathlib import Path

import lightning as L
import torch
import torch.distributed as dist
from timm.models.vision_transformer import Block
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainlab.data.base import ImageDataModule
from trainlab.strategy.ddp import DDPStrategy


def trainer(strategy, **kwargs) -> L.Trainer:
    options = dict(
        accelerator="cpu",
        devices=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    return L.Trainer(strategy=strategy, **{**options, **kwargs})


class Regression(L.LightningModule):
    """A tiny model whose batches (sample indices in column 0) and losses are recorded."""

    def __init__(self, width=6, hidden=32, lr=0.1, seed=0, transformer=False, layers=1):
        super().__init__()
        torch.manual_seed(seed)
        sizes = [width] + [hidden] * layers
        hidden_layers = [m for a, b in pairwise(sizes) for m in (nn.Linear(a, b), nn.Tanh())]
        self.net = nn.Sequential(*hidden_layers, nn.Linear(hidden, 1))
        self.block = Block(width, num_heads=2) if transformer else None
        self.lr, self.seen, self.losses = lr, {}, []

    def forward(self, x):
        if self.block is not None:
            x = self.block(x[:, None, :])[:, 0]
        return self.net(x).squeeze(1)

    def training_step(self, batch, batch_idx):
        index, x, y = batch
        self.seen.setdefault(self.current_epoch, []).extend(index.tolist())
        loss = nn.functional.mse_loss(self(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class IndexedImages(ImageDataModule):
    """40 images whose pixels hold their index; the train "augmentation" returns (index, one
    random draw), so a batch shows which samples a rank read and what each one drew."""

    name = "indexed"

    def build_splits(self):
        images = torch.arange(40, dtype=torch.uint8)[:, None, None, None].expand(40, 1, 2, 2)
        data = TensorDataset(images, torch.zeros(40, dtype=torch.long))
        return data, data, data

    def augments(self) -> bool:
        return True

    def transform(self, train: bool):
        return lambda image: torch.stack([image.float().mean(), torch.rand(())])


class Recorder(L.LightningModule):
    """Records the (index, draw) pairs of its batches per epoch."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(()))
        self.seen, self.draws = {}, {}

    def training_step(self, batch, batch_idx):
        x, _ = batch
        self.seen.setdefault(self.current_epoch, []).extend(x[:, 0].long().tolist())
        for index, draw in x.tolist():
            self.draws[f"{self.current_epoch}/{int(index)}"] = draw
        return self.w * x[:, 1].mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data(n=32, width=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, width, generator=g)
    return TensorDataset(torch.arange(n), x, x @ torch.randn(width, generator=g))


def loader(batch_size, shuffle=False, n=32):
    return DataLoader(data(n), batch_size=batch_size, shuffle=shuffle)


def params(model) -> list[torch.Tensor]:
    return [
        (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
        for p in model.parameters()
    ]


def max_diff(a, b) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


def single_process_step(batch_size, lr=0.1, **model_kwargs):
    """The reference: one plain SGD step on the first ``batch_size`` samples, no DDP."""
    model = Regression(lr=lr, **model_kwargs)
    _, x, y = next(iter(loader(batch_size)))
    nn.functional.mse_loss(model(x), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
    return params(model)


def main(out: Path) -> None:
    report = {}

    # 1. trainlab's own train loader (ImageDataModule: SeededSampler, seeded augmentation) on 2
    # ranks: disjoint shards covering every sample, reshuffled every epoch, and each sample's
    # augmentation the same with 0 and 2 loader workers.
    for workers in (0, 2):
        L.seed_everything(0)
        model = Recorder()
        datamodule = IndexedImages(batch_size=4, num_workers=workers)
        trainer(DDPStrategy(), max_epochs=2).fit(model, datamodule=datamodule)
        report[f"seen_workers{workers}"] = model.seen
        report[f"draws_workers{workers}"] = model.draws
    report["rank"] = model.global_rank

    # 2. 2 ranks x batch 8 x accumulation 2 == 1 process x batch 32, one optimizer step.
    model = Regression()
    trainer(DDPStrategy(), max_steps=1, accumulate_grad_batches=2).fit(model, loader(8))
    report["accumulation_diff"] = max_diff(params(model), single_process_step(32))

    write_report(out, report)


def write_report(out: Path, report: dict) -> None:
    """This rank's report to OUT_DIR/rank<N>.json, then the gloo group destroyed: left to
    interpreter shutdown it can abort the process (SIGABRT, "terminate called without an
    active exception": pytorch/pytorch#190489), as src/trainlab/training.py says."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{report['rank']}.json").write_text(json.dumps(report))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
