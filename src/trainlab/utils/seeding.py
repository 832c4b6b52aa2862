"""Seeds derived from where a run is (seed, epoch, batch, sample, rank), not from history.

Randomness that is a function of the position alone is what makes a resumed run draw
exactly what the uninterrupted run drew, on any number of workers.
"""

import os
import random

import numpy as np
import torch


def derived_seed(*parts: int) -> int:
    """A 63-bit seed from integers; Python hashes tuples of ints the same in every process."""
    return hash(tuple(int(p) for p in parts)) & (2**63 - 1)


def step_generator(seed: int, epoch: int, step: int) -> torch.Generator:
    """A CPU generator whose stream depends only on (seed, epoch, step): a step's masks and
    noise, equal on every rank and worker and on resume."""
    return torch.Generator().manual_seed(derived_seed(seed, epoch, step))


def seed_global_rngs(seed: int) -> None:
    """Seed torch (CPU and every GPU), numpy and random, silently (seed_everything logs)."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def run_seed() -> int:
    """The run's seed: seed_everything exports it, and Lightning's own samplers read it too."""
    return int(os.environ.get("PL_GLOBAL_SEED", 0))


def call_seeded(seed: int, fn, *args):
    """fn(*args) drawing from a torch CPU stream seeded with ``seed``; the global one is kept."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return fn(*args)
