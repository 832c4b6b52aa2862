"""A small random affine per image of a batch, drawn from the step's generator: the context
view of an I-JEPA variant (``model.context_jitter``), so that predicting the clean image's
target features from a shifted, rotated, rescaled context rewards features that ignore
small deformations, the invariance a kNN on raw pixels lacks.

Written here because torchvision's v2.RandomAffine draws one set of parameters per call
(one per batch), and drawing per image from the step's generator keeps runs reproducible
across ranks, workers and resumes, as the masks are.
"""

import math

import torch
import torch.nn.functional as F


def random_affine(
    images: torch.Tensor,
    generator: torch.Generator,
    degrees: float,
    translate: float,
    scale: float,
) -> torch.Tensor:
    """Each image rotated by up to ``degrees``, shifted by up to ``translate`` of its side
    and scaled by 1 +- ``scale``, uniformly; the border pixels fill what moves in."""
    u = torch.rand(len(images), 4, generator=generator, device=generator.device) * 2 - 1
    angle = u[:, 0] * math.radians(degrees)
    zoom = 1 + u[:, 1] * scale
    shift = u[:, 2:] * translate * 2  # affine_grid's coordinates span [-1, 1]
    cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
    theta = torch.stack(
        [torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1)], 1
    ).to(images)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, padding_mode="border", align_corners=False)
