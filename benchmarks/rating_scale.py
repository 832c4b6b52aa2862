"""The frozen-feature table's cost against the number of training images and the feature
width: seconds and peak memory of one extractor's rating, as the end-of-run table runs it for
each row: its features as they are and standardised (``+bn``), the linear grid's five weight
decays on each (L-BFGS, at most 1,000 iterations), and kNN on each.

Features are synthetic (10 Gaussian classes; val and test a tenth of train each), so the
cost is the protocol's alone, not a data set's. Each shape runs in a fresh process: its peak
resident memory (``ru_maxrss``) is that shape's; the table lists it above the process's size
after its imports, and beside the features' own float32 size. Shapes whose features alone would take several GB are left out here:
the table's pixel view is pooled to at most 32 x 32 (``PIXEL_SIDE``), so only an encoder
that wide would reach them.

    python -m benchmarks.rating_scale          # the table below, in benchmarks/README.md
"""

import json
import resource
import subprocess
import sys
import time

import torch

from trainlab.evaluation.features import standardised
from trainlab.evaluation.protocol import rate_features

CLASSES = 10
#: (training images, width): 768 and 3,072 are a ViT-B's features and the pooled pixels;
#: 12,288 and 150,528 the pixels of 64 and 224 px RGB photos, unpooled.
SHAPES = [
    *[(n, d) for d in (768, 3072) for n in (1_000, 5_000, 20_000, 50_000)],
    (1_000, 12_288), (5_000, 12_288), (1_000, 150_528),
]  # fmt: skip


def features(n: int, d: int) -> tuple[dict, dict]:
    generator = torch.Generator().manual_seed(0)
    centres = torch.randn(CLASSES, d, generator=generator) * 0.1
    feats, labels = {}, {}
    for split, size in (("train", n), ("val", max(n // 10, 100)), ("test", max(n // 10, 100))):
        labels[split] = torch.randint(CLASSES, (size,), generator=generator)
        feats[split] = centres[labels[split]] + torch.randn(size, d, generator=generator)
    return standardised({"pixels": feats}), labels


def one(n: int, d: int) -> dict:
    imported = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    feats, labels = features(n, d)
    size = sum(x.nbytes for splits in feats.values() for x in splits.values()) / 2**30
    start = time.perf_counter()
    rating = rate_features(feats, labels, CLASSES)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20 - imported
    return {"images": n, "width": d, "seconds": seconds, "peak_gib": peak,
            "features_gib": size, "linear_acc": rating.linear.test_acc}  # fmt: skip


def bench() -> list[dict]:
    rows = []
    for n, d in SHAPES:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.rating_scale", "--one", str(n), str(d)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| training images | width | features, GiB | seconds | peak memory above imports, GiB |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['images']:,} | {r['width']:,} | {r['features_gib']:.2f} | "
            f"{r['seconds']:.1f} | {r['peak_gib']:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(one(int(sys.argv[2]), int(sys.argv[3]))))
    else:
        print(table(bench()))
