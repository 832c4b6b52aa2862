"""No host reads of tensors on training steps that do not log: on a GPU each such read
(``.item()``, ``float(t)``, ``bool(t)``, ``.tolist()``, ``.cpu()``) waits for every kernel
queued so far, and the GPU idles while the host catches up.

On this CPU every tensor is a host tensor, so the test records where such reads happen
during a run of the default job through train.py, and allows only the sites that read CPU
tensors on a GPU machine too (the masks and the samplers draw on the CPU by design)."""

import collections
import traceback

import torch
from conftest import compose_cfg
from torch.overrides import TorchFunctionMode

from trainlab.training import train
from trainlab.utils.lightning_internals import TrainingEpochLoop

READS = {
    torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__float__,
    torch.Tensor.__int__, torch.Tensor.cpu, torch.Tensor.numpy,
}  # fmt: skip
# Sites whose tensors are on the CPU on any machine: (file, why).
CPU_SITES = {
    "networks/multiblock_masks.py": "masks are drawn on the CPU, then copied without blocking",
    "utils/seeding.py": "per-sample seeds, in the loader",
    "data/transforms.py": "each view's random crop, in the loader",
    "data/sampler.py": "the sampler's order, in the loader",
    "callbacks/non_finite.py": "its L2 shortcut reads only CPU gradients; CUDA's path reads none",
}


class RecordReads(TorchFunctionMode):
    def __init__(self, step: int, reads: dict):
        super().__init__()
        self.step, self.reads = step, reads

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in READS:
            frames = [f for f in traceback.extract_stack()[:-1] if "torch/" not in f.filename]
            site = next(
                (f"{f.filename}:{f.lineno}" for f in reversed(frames) if "site-packages/lightning" in f.filename or "trainlab" in f.filename),
                "?",
            )  # fmt: skip
            self.reads[self.step].append(site)
        return func(*args, **(kwargs or {}))


def test_steps_that_do_not_log_read_nothing_from_the_device(tmp_path, monkeypatch):
    reads = collections.defaultdict(list)
    advance = TrainingEpochLoop.advance

    def recorded(loop, data_fetcher):  # one batch: transfer, step, callbacks, logging
        with RecordReads(loop.trainer.global_step, reads):
            return advance(loop, data_fetcher)

    monkeypatch.setattr(TrainingEpochLoop, "advance", recorded)
    cfg = compose_cfg(
        tmp_path,
        [
            "trainer.max_epochs=1", "trainer.limit_train_batches=10", "trainer.limit_val_batches=0",
            "trainer.log_every_n_steps=5", "test=false", "features.enabled=false",
        ],
    )  # fmt: skip
    train(cfg)
    logging_steps = {4, 9}
    assert sorted(reads) == list(range(10))
    device_reads = {
        step: [s for s in sites if not any(cpu in s for cpu in CPU_SITES)]
        for step, sites in reads.items()
    }
    assert all(device_reads[s] for s in logging_steps)  # the probe sees Lightning's reads
    assert {s: r for s, r in device_reads.items() if s not in logging_steps and r} == {}
