"""The frozen-feature rating's whitening on wide views: the D x D covariance's eigenvectors
(what the grid used for every view) against the N x N Gram matrix's (what it uses when the
training images are fewer than the dimensions), on the shapes of the pixel view of a few
hundred photos. Same directions (tests/test_evaluation.py); time and memory differ."""

import statistics
import time

import torch

from trainlab.evaluation.linear_grid import whitening

IMAGES = 220  # the training split of 397 labelled photos (ants and bees), as rated
WIDTHS = {"64 px RGB": 3 * 64 * 64, "224 px RGB": 3 * 224 * 224}


def covariance_whitening(x: torch.Tensor, eps: float = 1e-6):
    """The covariance form, kept here as the reference the Gram form is measured against."""
    mean = x.mean(dim=0)
    eigval, eigvec = torch.linalg.eigh(torch.cov((x - mean).T.double()))
    kept = eigval > eps * eigval.max().clamp(min=1e-30)
    return mean, (eigvec[:, kept] * eigval[kept].rsqrt()).float()


def seconds(fn, x, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench(repeats: int = 3) -> list[dict]:
    rows = []
    for name, width in WIDTHS.items():
        x = torch.rand(IMAGES, width, generator=torch.Generator().manual_seed(0))
        gram = seconds(whitening, x, repeats)
        # the covariance alone is width^2 float64: 1.2 GB at 64 px, 181 GB at 224 px
        fits = width**2 * 8 < 8 * 2**30
        cov = seconds(covariance_whitening, x, repeats) if fits else None
        rows.append({"view": name, "width": width, "gram_s": gram, "covariance_s": cov})
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        f"| pixel view ({IMAGES} images) | dimensions | covariance form, s | Gram form, s | ratio |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        cov = r["covariance_s"]
        lines.append(
            f"| {r['view']} | {r['width']:,} | "
            + (
                f"{cov:.2f} | {r['gram_s']:.3f} | {cov / r['gram_s']:.0f}x |"
                if cov
                else f"cannot allocate ({r['width'] ** 2 * 8 / 2**30:,.0f} GiB) | {r['gram_s']:.3f} | - |"
            )
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(bench()))
