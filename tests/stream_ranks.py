"""What each of 2 ranks reads from litdata shards through StreamDataModule (one gloo job).

``python tests/stream_ranks.py SHARDS OUT``: Lightning's Fabric starts rank 1 by re-running
this script. Each rank writes OUT/rank<N>.json with the samples it got (as ids, see
``sample_ids``): two training epochs, the validation split, the first 3 batches of an
epoch whose loader state rank 0 saves to OUT/state2.pt, and the rest of the epochs whose
1-rank loader states the test saved in OUT/state1.pt and OUT/state1_odd.pt.
tests/test_stream.py asserts on them.
"""

import hashlib
import itertools
import json
import sys
from pathlib import Path

import lightning as L
import torch

from trainlab.data.stream import StreamDataModule


def stream_module(shards) -> StreamDataModule:
    """Batches of 4, and the evaluation transform for training too: an image's pixels then
    identify the sample, whichever rank, epoch or position it comes in."""
    L.seed_everything(7, verbose=False)
    dm = StreamDataModule(root=str(shards), num_classes=3, image_size=16, batch_size=4)
    dm.setup()
    dm.train_set.image_transform = dm.transform(train=False)
    return dm


def sample_ids(loader, limit=None) -> list[str]:
    """Sample ids of the loader's next ``limit`` batches (all of an epoch by default)."""
    batches = itertools.islice(loader, limit)
    return [hashlib.sha1(x.numpy().tobytes()).hexdigest() for images, _ in batches for x in images]


if __name__ == "__main__":
    shards, out = Path(sys.argv[1]), Path(sys.argv[2])
    fabric = L.Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    dm = stream_module(shards)
    train = dm.train_dataloader()
    seen = {"epoch0": sample_ids(train), "epoch1": sample_ids(train)}
    seen["val"] = sample_ids(dm.val_dataloader())
    cut = stream_module(shards).train_dataloader()  # a new data set, as in a new run
    seen["before_state2"] = sample_ids(cut, limit=3)
    if fabric.global_rank == 0:  # Lightning's checkpoint holds rank 0's loader state
        torch.save(cut.state_dict(), out / "state2.pt")
    for name in ("state1", "state1_odd"):
        resumed = stream_module(shards).train_dataloader()
        resumed.load_state_dict(torch.load(out / f"{name}.pt", weights_only=True))
        seen[f"after_{name}"] = sample_ids(resumed)
    (out / f"rank{fabric.global_rank}.json").write_text(json.dumps(seen))
    torch.distributed.destroy_process_group()  # as tests/ddp_harness.py's write_report
