"""Will the run fit the device? The estimated peak per device (memory_fit/estimate.py)
against the device's memory, decided before the run dir exists, with ``memory_fit.policy``
for a run that does not fit (the memory fit part, docs/parts/memory_fit.md: the checks call
``memory_fit``'s partial, configs/memory_fit/default.yaml):

- ``accumulate``: the smallest gradient accumulation that fits. The per-device batch
  shrinks, the global batch and the schedules stay; nothing is computed twice.
- ``checkpoint``: activation checkpointing (``model.encoder.grad_checkpointing``), which
  recomputes each block's forward pass in the backward pass.
- ``refuse``: stop with the numbers.

One line says what was chosen and why. A run that fits no way stops with one line (exit 2)
before its run dir. The choice is kept in the run dir (``memory_fit.json``): a resumed run
and a child rank apply it rather than deciding again.

Every rank decides alike: the estimate is counted on the CPU, and the device's size is its
total memory, not its free memory, which differs from rank to rank by a few megabytes.
"""

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Literal

import torch
from annotated_types import Interval
from omegaconf import DictConfig, OmegaConf

from trainlab.memory_fit.estimate import (
    GIB,
    PeakEstimate,
    estimate_peak,
    random_batch,
    set_checkpointing,
)
from trainlab.utils.errors import ConfigError
from trainlab.utils.logging import get_logger
from trainlab.utils.ranges import Positive

log = get_logger(__name__)
RECORD = "memory_fit.json"
AUTOCAST = {"bf16-mixed": torch.bfloat16, "bf16": torch.bfloat16, "16-mixed": torch.float16}


@dataclass
class Fit:
    accumulate_grad_batches: int
    grad_checkpointing: bool
    reason: str

    def changes(self, cfg: DictConfig) -> bool:
        """Whether ``cfg`` runs otherwise than this choice."""
        return self.accumulate_grad_batches != (
            cfg.trainer.get("accumulate_grad_batches") or 1
        ) or (
            self.grad_checkpointing
            != bool(OmegaConf.select(cfg, "model.encoder.grad_checkpointing"))
        )

    def apply(self, cfg: DictConfig) -> DictConfig:
        """A copy of ``cfg`` with this choice."""
        out = cfg.copy()
        OmegaConf.update(out, "trainer.accumulate_grad_batches", self.accumulate_grad_batches)
        if self.grad_checkpointing:
            OmegaConf.update(out, "model.encoder.grad_checkpointing", True)
        return out

    def record(self, run_dir: Path) -> None:
        """Kept in the run dir: a resume and the child ranks apply it."""
        (run_dir / RECORD).write_text(json.dumps(asdict(self), indent=1) + "\n")


def device_size(cfg: DictConfig, given: float | None) -> float | None:
    """``memory_fit.device_gib``, else this rank's GPU's total memory; None on CPUs."""
    if given:
        return float(given)
    if cfg.trainer.get("accelerator") in ("gpu", "cuda", "auto") and torch.cuda.is_available():
        return torch.cuda.mem_get_info(int(os.environ.get("LOCAL_RANK", 0)))[1] / GIB
    return None


def recorded(run_dir: Path) -> Fit | None:
    path = run_dir / RECORD
    return Fit(**json.loads(path.read_text())) if path.is_file() else None


def random_inputs(datamodule, n: int):
    """n random images shaped like the data module's training batches, on the CPU."""
    views = getattr(datamodule, "views", None)
    return random_batch(datamodule.in_chans, datamodule.image_size, views, n)


def _gib(x: float) -> str:
    return f"{x / GIB:.3g} GiB"


def fit_run(
    cfg: DictConfig,
    model,
    datamodule,
    world_size: int,
    rank_zero: bool,
    policy: Literal["accumulate", "checkpoint", "refuse"] = "accumulate",
    device_gib: Positive | None = None,
    margin: Annotated[float, Interval(ge=0, lt=1)] = 0.2,
) -> Fit | None:
    """The run's fit: as recorded in its run dir (a resume, a child rank), else decided;
    the model's checkpointing set to it. Rank 0 says it in one line."""
    run_dir = Path(cfg.paths.output_dir)
    fit = recorded(run_dir) if cfg.get("resume") or not rank_zero else None
    source = " (as the run dir records it)" if fit is not None else ""
    if fit is None:
        fit = decide(cfg, model, datamodule, world_size, policy, device_gib, margin)
    if fit is not None:
        if fit.grad_checkpointing:
            set_checkpointing(model, True)
        if rank_zero:
            log.info(fit.reason + source)
    return fit


def decide(
    cfg: DictConfig,
    model,
    datamodule,
    world_size: int,
    policy: str = "accumulate",
    device_gib: float | None = None,
    margin: float = 0.2,
    estimate: PeakEstimate | None = None,
) -> Fit | None:
    """The fit of the model, built on the CPU, at the config's batch; None where nothing is
    decided (no device size, a sharded strategy, a model without a step to probe).
    ``estimate``: the model's, where it is known (benchmarks/fit_table.py: one model, many
    devices)."""
    device = device_size(cfg, device_gib)
    sharded = "fsdp" in str(OmegaConf.select(cfg, "strategy._target_", default="")).lower()
    if device is None or sharded or not hasattr(model, "loss"):
        return None
    budget = device * (1 - margin) * GIB
    accumulate = cfg.trainer.get("accumulate_grad_batches") or 1
    per_device = datamodule.batch_size
    total = per_device * world_size * accumulate  # the global batch
    dtype = AUTOCAST.get(str(cfg.trainer.get("precision")))
    precision = lambda: torch.autocast("cpu", dtype=dtype, enabled=dtype is not None)  # noqa: E731
    checkpointing = bool(OmegaConf.select(cfg, "model.encoder.grad_checkpointing"))
    if estimate is None:
        estimate = estimate_peak(
            model, lambda n: random_inputs(datamodule, n), per_device, precision
        )
    estimate = estimate.at(per_device)
    room = f"{device:.3g} GiB less memory_fit.margin={margin}: {_gib(budget)}"
    said = f"memory: estimated peak {_gib(estimate.peak)} per device at {per_device} images"
    if estimate.peak <= budget:
        return Fit(accumulate, checkpointing, f"{said} fits ({room})")
    if policy == "accumulate":
        for more in range(accumulate + 1, total // world_size + 1):
            if total % (world_size * more) == 0:
                smaller = estimate.at(total // (world_size * more))
                if smaller.peak <= budget:
                    return Fit(more, checkpointing, _chosen(said, room, smaller, more, total))
    elif policy == "checkpoint" and not checkpointing:
        if OmegaConf.select(cfg, "model.encoder.grad_checkpointing") is not None:
            before = set_checkpointing(model, True)
            recomputed = estimate_peak(
                model, lambda n: random_inputs(datamodule, n), per_device, precision
            )
            if recomputed.peak <= budget:
                return Fit(accumulate, True, f"{said} does not fit ({room}): "
                           f"model.encoder.grad_checkpointing=true, {_gib(recomputed.peak)} "
                           "(memory_fit.policy=checkpoint)")  # fmt: skip
            set_checkpointing(model, before)
    others = " or ".join(p for p in ("accumulate", "checkpoint") if p != policy)
    raise ConfigError(
        f"{said} does not fit ({room}) and memory_fit.policy={policy} finds no way: set "
        f"memory_fit.policy={others}, strategy=fsdp, or a smaller data.global_batch_size"
    )


def _chosen(said: str, room: str, smaller: PeakEstimate, more: int, total: int) -> str:
    return (
        f"{said} does not fit ({room}): trainer.accumulate_grad_batches={more}, "
        f"{smaller.batch} images a step, {_gib(smaller.peak)} (memory_fit.policy=accumulate; "
        f"the global batch of {total} and the schedules unchanged)"
    )
