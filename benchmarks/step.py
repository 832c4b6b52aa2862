"""The I-JEPA training step, same model, batch and masks (so the same token counts), run as:
a reference-style bare loop (how the official code runs its step), trainlab's step in a
bare loop and through Lightning, and trainlab's step with torch's default AdamW (foreach, as
before fused became trainlab's default), torch.compile or bf16 autocast. Every variant does
the same work per step: masks, target forward, context forward, predictor, loss, AdamW with
the per-step schedules, EMA update (through Lightning, also the monitors' feature bank).
"""

import statistics
import time

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from trainlab.utils.seeding import step_generator


class SameBatch(Dataset):
    """One batch repeated: the loader costs nothing, so only the step is timed."""

    def __init__(self, images, labels, steps):
        self.images, self.labels, self.steps = images, labels, steps

    def __len__(self):
        return self.steps

    def __getitem__(self, i):
        return self.images, self.labels


def sync(device: str) -> None:
    """Wait for the GPU's queued kernels, so a wall-clock reading covers them."""
    if device == "cuda":
        torch.cuda.synchronize()


class StepTimer(L.Callback):
    def __init__(self, warmup, device):
        self.warmup, self.device, self.start, self.steps = warmup, device, None, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == self.warmup:
            sync(self.device)
            self.start = time.perf_counter()

    def on_train_end(self, trainer, pl_module):
        sync(self.device)
        self.seconds = time.perf_counter() - self.start


def lightning_rate(make_model, images, labels, steps, warmup, device="cpu") -> float:
    model = make_model()
    timer = StepTimer(warmup, device)
    loader = DataLoader(SameBatch(images, labels, steps + warmup), batch_size=None)
    trainer = L.Trainer(
        accelerator="gpu" if device == "cuda" else "cpu",
        devices=1,
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


def loop_rate(
    make_model,
    images,
    labels,
    steps,
    warmup,
    reference=False,
    foreach_adamw=False,
    compiled=False,
    bf16=False,
    fused_attention=False,
    after_step=None,
    device="cpu",
) -> tuple[float, float, float]:
    """(samples/s, tokens/s, TFLOP/s) of a bare PyTorch loop over the module's own step: masks, target forward,
    context forward, predictor, loss, AdamW with the per-step schedules, EMA.

    ``reference``: the step run the way the reference I-JEPA code runs it, as GUIDE.md and the
    paper describe it (reimplemented here, not copied): attention written out as
    softmax(q k^T) v (timm's unfused path), the predictor's last block on every row (whose
    context rows are then thrown away), AdamW as a loop over tensors (torch's default on
    CPUs), an EMA loop over parameters and a host sync per step (below). trainlab
    writes attention out too under bf16 on a CPU (callbacks.cpu_bf16_attention), unless
    ``fused_attention`` keeps torch's fused kernel. ``after_step()`` runs after every step
    (step_profile.py passes its profiler's ``step``). ``device``: "cpu" or "cuda"."""
    model = make_model().to(device)
    model.train()
    images, labels = images.to(device), labels.to(device)
    if reference or (bf16 and not fused_attention and device == "cpu"):
        for module in model.modules():  # timm's written-out softmax(q k^T) v
            if getattr(module, "fused_attn", False):
                module.fused_attn = False
    if reference:  # the reference runs the predictor's last block on every row
        model.predictor.all_rows_in_last_block = True
    if compiled:
        from trainlab.compiler.regional import compile_networks

        compile_networks(model)
    optimizer = model.configure_optimizers()  # fused AdamW: trainlab's default (optim/fused.py)
    if reference or foreach_adamw:  # torch's own default, the reference's
        for group in optimizer.param_groups:
            group["fused"] = None
    total, tokens, flops = steps + warmup, 0, 0
    for step in range(total):
        if step == warmup:
            sync(device)
            start = time.perf_counter()
        s = {"lr": 1e-3, "wd": 0.04, "ema": 0.996 + 0.004 * step / total}
        for group in optimizer.param_groups:
            group["lr"] = s["lr"]
            if group["decay"]:
                group["weight_decay"] = s["wd"]
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            # timed step j draws mask j in every variant, whatever its warm-up length
            masks = step - warmup if step >= warmup else steps + step
            loss, _ = model.loss(images, step_generator(0, 0, masks))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if reference:  # the reference's EMA: one in-place update per parameter pair
            with torch.no_grad():
                for target, online in zip(
                    model.target_encoder.parameters(), model.encoder.parameters(), strict=True
                ):
                    target.mul_(s["ema"]).add_((1.0 - s["ema"]) * online.detach())
            loss.item()  # its loss meter reads the loss every step: a host sync on a GPU
        else:
            model.update_target(s["ema"])
        if step >= warmup:  # IJEPA.count_work's counts
            tokens, flops = tokens + model.step_tokens, flops + model.step_flops
        if after_step is not None:
            after_step()
    sync(device)
    seconds = time.perf_counter() - start
    return steps * len(images) / seconds, tokens / seconds, flops / seconds / 1e12


# Rows of the step table: name -> loop_rate's keyword arguments (None: through Lightning).
# Each bf16 row is compared with the reference-style loop in bf16, the others with its float32.
VARIANTS = {
    "reference-style bare loop (unfused attention, per-parameter EMA, sync per step)": {
        "reference": True
    },
    "trainlab, bare loop (eager)": {},
    "trainlab through Lightning (eager)": None,
    "trainlab, bare loop, torch's default AdamW (foreach, before)": {"foreach_adamw": True},
    "trainlab, bare loop, torch.compile (compile=true)": {"compiled": True},
    "bf16: reference-style bare loop": {"reference": True, "bf16": True},
    "bf16: trainlab, bare loop, torch's fused attention kernel (before)": {
        "bf16": True,
        "fused_attention": True,
    },
    "bf16: trainlab, bare loop (attention written out on a CPU)": {"bf16": True},
    "bf16: trainlab, bare loop, torch's default AdamW (foreach, before)": {
        "bf16": True,
        "foreach_adamw": True,
    },
    "bf16: trainlab, bare loop, torch.compile": {"bf16": True, "compiled": True},
}


# On a GPU trainlab keeps torch's fused attention kernel in bf16 too (cpu_bf16_attention acts
# on CPUs alone): the CPU table's two bf16 attention rows are one row there. bf16 rows only:
# with the float32 rows (no TF32, seconds a step at ViT-H/14) the table did not end in 330 s
# on an H100; train.py's own rate is the MFU run's.
_GPU_ROWS = VARIANTS | {"bf16: trainlab, bare loop (eager)": {"bf16": True}}
GPU_VARIANTS = {
    name: _GPU_ROWS[name]
    for name in [
        "bf16: reference-style bare loop",
        "bf16: trainlab, bare loop (eager)",
        "bf16: trainlab, bare loop, torch's default AdamW (foreach, before)",
        "bf16: trainlab, bare loop, torch.compile",
    ]
}


def reference_for(name: str, variants: dict = VARIANTS) -> str:
    """The reference-style row a variant's speed-up is measured against: same precision."""
    bf16 = (variants[name] or {}).get("bf16", False)
    return next(
        n
        for n, kw in variants.items()
        if kw and kw.get("reference") and kw.get("bf16", False) == bf16
    )


def bench(
    make_model, images, labels, steps=15, warmup=3, repeats=3, device="cpu", compiled=True
) -> dict:
    """{variant: (median samples/s, median tokens/s or None through Lightning, speed-up)};
    variants alternate in every repeat, so drift on a shared machine hits all of them. The
    speed-up is (median, lowest, highest) over repeats of the variant's samples/s over its
    reference-style row's in the same repeat: paired, so slow spells between repeats cancel.
    The compiled loop gets 5 more warm-up steps (compilation, and a recompile for dynamic
    lengths). ``device="cuda"`` runs GPU_VARIANTS on the GPU; ``compiled=False`` leaves out
    the compiled rows."""
    variants = GPU_VARIANTS if device == "cuda" else VARIANTS
    if not compiled:
        variants = {n: kw for n, kw in variants.items() if not (kw or {}).get("compiled")}
    rates = {name: [] for name in variants}
    for _ in range(repeats):
        for name, kwargs in variants.items():
            if kwargs is None:
                rate = (lightning_rate(make_model, images, labels, steps, warmup, device), None)
            else:
                extra = 5 if kwargs.get("compiled") else 0
                rate = loop_rate(
                    make_model, images, labels, steps, warmup + extra, device=device, **kwargs
                )
            rates[name].append(rate)
    out = {}
    for name, runs in rates.items():
        reference = rates[reference_for(name, variants)]
        ratios = [r[0] / ref[0] for r, ref in zip(runs, reference, strict=True)]
        out[name] = (
            statistics.median(r[0] for r in runs),
            None if runs[0][1] is None else statistics.median(r[1] for r in runs),
            (statistics.median(ratios), min(ratios), max(ratios)),
        )
    return out
