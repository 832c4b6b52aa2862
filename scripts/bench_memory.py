"""Peak memory of I-JEPA training steps with and without activation checkpointing.

On CUDA: torch.cuda.max_memory_allocated. On CPU: the peak resident set size of a fresh
process per setting, minus its size after building the model (ru_maxrss), so each number
is the training steps' own high-water mark.
"""

import json
import subprocess
import sys

import torch

CHILD = r"""
import json, resource, sys, torch
sys.path.insert(0, "scripts")
from bench import make_ijepa, make_batch
from trainlab.data.masks import step_generator
ckpt = sys.argv[1] == "1"
model = make_ijepa(grad_checkpointing=ckpt)
images, labels = make_batch()
device = "cuda" if torch.cuda.is_available() else "cpu"
model, images, labels = model.to(device), images.to(device), labels.to(device)
optimizer = model.configure_optimizers()
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for step in range(3):
    loss, features, _ = model.jepa_loss(images, step_generator(0, 0, step))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
if device == "cuda":
    peak = torch.cuda.max_memory_allocated() / 2**20
else:
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"peak_mib": peak, "device": device}))
"""


def peak_mib(grad_checkpointing: bool) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, "1" if grad_checkpointing else "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench() -> dict:
    plain, ckpt = peak_mib(False), peak_mib(True)
    return {
        "device": plain["device"],
        "plain_mib": plain["peak_mib"],
        "checkpointed_mib": ckpt["peak_mib"],
        "ratio": ckpt["peak_mib"] / plain["peak_mib"],
    }


if __name__ == "__main__":
    print(bench(), torch.__version__)
