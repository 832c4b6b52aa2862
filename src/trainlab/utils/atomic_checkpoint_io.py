"""Checkpoints written to a temporary file, then renamed into place.

Lightning's TorchCheckpointIO writes the target file directly, so a kill during a save
(pre-emption, OOM killer, a crashed node) can leave a truncated last.ckpt that no resume
can read. A rename within one directory is atomic on POSIX: the old file stays whole
until the new one is complete.
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
