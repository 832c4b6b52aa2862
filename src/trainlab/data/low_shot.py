"""Low-shot subsets: the same fraction of every class, drawn once from a seed.

The I-JEPA paper's ImageNet-1% protocol trains on about 13 images per class; with
``data.train_fraction=0.01`` every data set gets that protocol.
"""

import math

import torch
from torch.utils.data import Dataset, Subset, TensorDataset

from trainlab.utils.errors import DataError


def kept_labels(dataset: Dataset) -> torch.Tensor | None:
    """Every label of a data set where it keeps them apart from its images (torchvision's
    ``targets``, a TensorDataset, Subsets of these); None where reading them means decoding."""
    if isinstance(dataset, Subset):
        inner = kept_labels(dataset.dataset)
        return None if inner is None else inner[torch.as_tensor(dataset.indices, dtype=torch.long)]
    if isinstance(dataset, TensorDataset):
        return dataset.tensors[1]
    if hasattr(dataset, "targets"):
        return torch.as_tensor(dataset.targets)
    return None


def labels_of(dataset: Dataset) -> torch.Tensor:
    """Every label of a data set: kept ones as they are, else read sample by sample."""
    kept = kept_labels(dataset)
    if kept is not None:
        return kept
    return torch.tensor([int(dataset[i][1]) for i in range(len(dataset))])


def class_balanced_subset(dataset: Dataset, fraction: float, seed: int) -> Subset:
    """``fraction`` of each class (at least one image per class), chosen with ``seed``."""
    if not 0 < fraction <= 1:
        raise DataError(f"data.train_fraction={fraction} must be in (0, 1]")
    labels = labels_of(dataset)
    generator = torch.Generator().manual_seed(seed)
    chosen = []
    for label in labels.unique():
        members = (labels == label).nonzero().flatten()
        keep = max(1, math.floor(len(members) * fraction + 0.5))
        chosen.append(members[torch.randperm(len(members), generator=generator)[:keep]])
    return Subset(dataset, torch.cat(chosen).sort().values.tolist())
