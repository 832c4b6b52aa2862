"""trainlab: a Lightning + Hydra template for distributed vision pre-training."""

__version__ = "0.1.0"
