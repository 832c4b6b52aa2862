"""Checkpoints written to a temporary file beside the target, fsynced, then renamed into place.

Lightning (>= 2.4) already saves through an fsspec transaction, but for local paths fsspec
puts its temporary file in the system temp dir (``tempfile.mkstemp()``) and commits with
``shutil.move``. When that dir is on another file system (a tmpfs /tmp, checkpoints on
NFS or Lustre, as on most clusters), the move is a copy, so a kill during it (pre-emption,
OOM killer, a crashed node) still leaves a truncated last.ckpt; nothing is fsynced either,
so a power loss can leave an empty one, and a small /tmp fails large saves. Here the temporary
file sits in the target's directory, is fsynced, and ``os.replace`` renames it: atomic on
POSIX, so the old file stays whole until the new one is complete.
"""

import os
from pathlib import Path
from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            super().save_checkpoint(checkpoint, tmp, storage_options)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())  # on disk before the rename makes it the checkpoint
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
