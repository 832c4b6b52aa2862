"""``matmul_precision``: float32 matrix products on CUDA GPUs, TF32 tensor cores or full float32."""

import torch


def set_matmul_precision(precision: str) -> None:
    """``torch.set_float32_matmul_precision`` where a CUDA GPU is present ("high": TF32;
    Lightning advises it on every GPU run left at torch's "highest"). CPUs keep torch's
    default: "high" would also let oneDNN round float32 products on CPUs that can, and the
    recorded trace of ijepa_digits would change."""
    if torch.cuda.is_available():
        torch.set_float32_matmul_precision(precision)
