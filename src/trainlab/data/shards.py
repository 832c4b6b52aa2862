"""What goes into a litdata shard of ``data=stream`` (written by scripts/make_shards.py)."""

import io
from pathlib import Path

from PIL import Image


def encoded_sample(item: tuple[str, int, str]):
    """litdata's worker function: the file's bytes and label, or nothing if it does not decode."""
    path, label, skipped_list = item
    data = Path(path).read_bytes()
    try:
        Image.open(io.BytesIO(data)).convert("RGB")
    except Exception as e:  # anything PIL raises on a bad file
        with open(skipped_list, "a") as f:
            f.write(f"{path}\t{type(e).__name__}: {e}\n")
        return
    yield {"image": data, "label": label}
