"""litdata vs mosaicml-streaming on the same images: shard writing, and images/s into a
training loop from local disk and from an S3 store on loopback (trainlab/data/loopback_s3.py).

mosaicml-streaming is not a trainlab dependency (it pins numpy<2.2 and transformers<5 and
pulls the Azure, GCS and OCI SDKs), so this runs in a virtual environment of its own:

    python3 -m venv /tmp/streams && /tmp/streams/bin/pip install torch==2.14.1 \\
        torchvision==0.29.1 mosaicml-streaming==0.13.0 litdata==0.2.76 "moto[s3]==5.2.5" \\
        flask flask-cors
    PYTHONPATH=src:. /tmp/streams/bin/python research/compare_stream_libraries.py

Both write the same JPEG bytes into shards of the same size (through trainlab.data.shards,
make_shards.py's per-image function) and read them back: decode and transform them with trainlab's transforms (224 px
random-resized crop), shuffle, and use their own loader with the same batch size and
workers. Libraries take turns in every repeat; medians. Writes research/stream_libraries.md.
"""

import argparse
import datetime
import io
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path

import litdata
import streaming
import torch
from litdata.streaming.resolver import Dir
from PIL import Image
from streaming import MDSWriter
from streaming.base.util import clean_stale_shared_memory
from torchvision.datasets.folder import find_classes, make_dataset

from benchmarks.stream import BATCH, COMMON, images_per_s, make_folder
from trainlab.data.loopback_s3 import loopback_s3
from trainlab.data.shards import encoded_sample
from trainlab.data.transforms import build_transform

ROOT = Path(__file__).resolve().parents[1]
CHUNK_MB = 8
TRANSFORM = build_transform(
    COMMON["image_size"], COMMON["mean"], COMMON["std"], True, COMMON["crop_scale"]
)


def decoded(item: dict):
    return TRANSFORM(Image.open(io.BytesIO(item["image"])).convert("RGB")), item["label"]


def write_rates(folder: Path, out: Path) -> dict[str, float]:
    """Images/s writing the train split as shards in one process, through trainlab.data.shards'
    per-image function (reads the file, checks that it decodes): litdata.optimize with
    one worker, and MDSWriter."""
    _, class_to_idx = find_classes(str(folder / "train"))
    files = make_dataset(str(folder / "train"), class_to_idx, extensions=(".jpg",))
    inputs = [(path, label, str(out / "skipped.txt")) for path, label in files]
    out.mkdir()
    start_method = multiprocessing.get_start_method()
    start = time.perf_counter()
    litdata.optimize(
        fn=encoded_sample,
        inputs=inputs,
        output_dir=str(out / "litdata"),
        chunk_bytes=int(CHUNK_MB * 2**20),
        num_workers=1,
        reorder_files=False,
    )
    rates = {"litdata": len(files) / (time.perf_counter() - start)}
    # optimize() switches the whole process to "spawn"; loader workers would then import
    # everything again in every epoch.
    multiprocessing.set_start_method(start_method, force=True)
    start = time.perf_counter()
    columns = {"image": "bytes", "label": "int"}
    with MDSWriter(out=str(out / "mds"), columns=columns, size_limit=int(CHUNK_MB * 2**20)) as w:
        for item in inputs:
            for sample in encoded_sample(item):
                w.write(sample)
    rates["mds"] = len(files) / (time.perf_counter() - start)
    return rates


class LitdataImages(litdata.StreamingDataset):
    def __getitem__(self, index):
        return decoded(super().__getitem__(index))


class MDSImages(streaming.StreamingDataset):
    def __getitem__(self, index):
        return decoded(super().__getitem__(index))


def litdata_loader(source, workers: int, cache_dir=None):
    if cache_dir is not None:
        source = Dir(path=str(cache_dir), url=source)
    data = LitdataImages(source, shuffle=True, drop_last=True, seed=0)
    return litdata.StreamingDataLoader(data, batch_size=BATCH, num_workers=workers)


def mds_loader(workers: int, local: Path, remote: str | None = None):
    data = MDSImages(
        remote=remote, local=str(local), shuffle=True, shuffle_seed=0, batch_size=BATCH
    )
    return streaming.StreamingDataLoader(
        data, batch_size=BATCH, num_workers=workers, drop_last=True
    )


def compare(images: int, repeats: int, workers: int) -> dict:
    rates: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        make_folder(tmp / "folder", images)
        write = write_rates(tmp / "folder", tmp / "shards")
        lit, mds = tmp / "shards" / "litdata", tmp / "shards" / "mds"
        with loopback_s3(tmp) as s3:
            s3.upload(lit, "s3://bench/lit")
            s3.upload(mds, "s3://bench/mds")
            os.environ.update(s3.env, S3_ENDPOINT_URL=s3.env["AWS_ENDPOINT_URL"])  # MDS's name
            for r in range(repeats):
                runs = {  # a new, empty cache for S3 in every repeat
                    "litdata local": (litdata_loader, str(lit), workers),
                    "mds local": (mds_loader, workers, mds),
                    "litdata s3": (litdata_loader, "s3://bench/lit", workers, tmp / f"lit{r}"),
                    "mds s3": (mds_loader, workers, tmp / f"mds{r}", "s3://bench/mds"),
                }
                for name, (make, *args) in runs.items():
                    clean_stale_shared_memory()
                    loader = make(*args)
                    epochs = ("cold", "cached") if name.endswith("s3") else ("",)
                    for epoch in epochs:
                        key = f"{name} {epoch}".strip()
                        rates.setdefault(key, []).append(images_per_s(loader))
                    del loader
    return {
        "images": images,
        "repeats": repeats,
        "workers": workers,
        "write": write,
        "rates": rates,
        "median": {k: statistics.median(v) for k, v in rates.items()},
    }


def report(result: dict) -> str:
    m = result["median"]
    rows = [
        ("write shards, 1 process", result["write"]["litdata"], result["write"]["mds"]),
        ("local disk", m["litdata local"], m["mds local"]),
        ("loopback S3, empty cache", m["litdata s3 cold"], m["mds s3 cold"]),
        ("loopback S3, next epoch (cache)", m["litdata s3 cached"], m["mds s3 cached"]),
    ]
    raw = "; ".join(f"{k} {', '.join(f'{v:.0f}' for v in vs)}" for k, vs in result["rates"].items())
    table = "\n".join(f"| {n} | {a:.0f} | {b:.0f} | {a / b:.2f} |" for n, a, b in rows)
    return f"""# litdata vs mosaicml-streaming

Written by `research/compare_stream_libraries.py` on {datetime.date.today()}: litdata
{litdata.__version__}, mosaicml-streaming {streaming.__version__}, torch {torch.__version__},
{os.cpu_count()} CPU cores, no GPU.

{result["images"]} generated JPEGs in {CHUNK_MB} MB shards; trainlab's 224 px training
transform; batch {BATCH}, {result["workers"]} loader workers, shuffled; each library's own
loader; images/s over one epoch, loader start-up included, median of {result["repeats"]}
(writing: once). The S3 server (moto) runs on the same 2 cores.

| images/s | litdata | mosaicml-streaming | litdata / MDS |
|---|---|---|---|
{table}

Every epoch (images/s, in the order measured): {raw}
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "research" / "stream_libraries.md")
    args = parser.parse_args()
    result = compare(args.images, args.repeats, args.workers)
    print(result["rates"])
    text = report(result)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
