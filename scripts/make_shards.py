"""Convert an ImageFolder tree (train/ and val/) into litdata shards for `data=stream`.

    python scripts/make_shards.py /data/imagenet /data/imagenet-shards
    aws s3 sync /data/imagenet-shards s3://my-bucket/imagenet-shards   # to stream from S3

Each split becomes chunks (about --chunk-mb each) of the images' original encoded
(compressed) bytes plus their class index, and an index.json; `classes.json` holds the
class names. The bytes are not re-encoded, so an image read back decodes to exactly the
pixels of its file.
Files that cannot be decoded are skipped and listed (`<split>.skipped.txt` and the
summary), never dropped without a count.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import litdata
from torchvision.datasets.folder import find_classes, make_dataset

from trainlab.data.shards import encoded_sample


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="holds train/<class>/* and val/<class>/*")
    parser.add_argument("out", type=Path, help="the output directory")
    parser.add_argument("--chunk-mb", type=float, default=64, help="chunk size in MB")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--overwrite", action="store_true", help="replace shards in out")
    args = parser.parse_args()
    for split in ("train", "val"):
        if not (args.folder / split).is_dir():
            sys.exit(f"error: no {split}/ under {args.folder}: expected {split}/<class>/<image>")
        if (args.out / split / "index.json").exists() and not args.overwrite:
            sys.exit(
                f"error: {args.out / split} already holds shards: choose another output "
                "directory, or pass --overwrite to replace them"
            )
    classes, class_to_idx = find_classes(str(args.folder / "train"))
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"classes": len(classes)}
    start = time.monotonic()
    for split in ("train", "val"):
        # Every file is offered; encoded_sample skips (and lists) those that do not decode.
        files = make_dataset(
            str(args.folder / split), class_to_idx, is_valid_file=lambda p: Path(p).is_file()
        )
        skipped_list = args.out / f"{split}.skipped.txt"
        skipped_list.write_text("")
        t0 = time.monotonic()
        litdata.optimize(
            fn=encoded_sample,
            inputs=[(path, label, str(skipped_list)) for path, label in files],
            output_dir=str(args.out.resolve() / split),
            chunk_bytes=int(args.chunk_mb * 2**20),
            # No chunk compression: encoded images are compressed already, and litdata 0.2.76
            # unpacks compressed local chunks in place (the shard dir changes when read).
            num_workers=min(args.workers, max(1, len(files))),
            mode="overwrite",  # refused above unless --overwrite
            reorder_files=False,  # keep the folder's order: reproducible shards
        )
        skipped = [line for line in skipped_list.read_text().splitlines() if line]
        images = len(files) - len(skipped)
        chunks = json.loads((args.out / split / "index.json").read_text())["chunks"]
        summary[split] = {
            "images": images,
            "skipped": len(skipped),
            "chunks": len(chunks),
            "bytes": sum(c["chunk_bytes"] for c in chunks),
            "images_per_s": round(images / (time.monotonic() - t0), 1),
        }
        for line in skipped:
            print(f"skipped {line}", file=sys.stderr)
    (args.out / "classes.json").write_text(json.dumps(classes) + "\n")
    summary["seconds"] = round(time.monotonic() - start, 1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
