"""trainlab: a Lightning + Hydra template for distributed vision pre-training."""

from trainlab.data.class_count import register as _register_resolvers

__version__ = "0.1.0"

_register_resolvers()  # before any config is resolved: ${count_classes:...} in configs/data
