"""Sharded image streams (scripts/make_shards.py) from a local directory or an S3-compatible
object store, through litdata, Lightning's streaming library (README: why litdata).

litdata splits each epoch's chunks over ranks and workers, shuffles from the seed every
epoch, caches downloaded chunks on local disk within a size limit, and its loader has a
state_dict, so Lightning checkpoints the position in an epoch; on another number of ranks
it resumes the interrupted epoch from the same order (elastic resume). What is added
here: decoding the stored bytes, the augmentation seeded per sample as in
data/sampler.py, and a fix for resuming into the next epoch (EpochStreamingDataLoader).
tests/test_stream.py checks these guarantees on 1 and 2 ranks, and S3 through a loopback
server with the cache reused.
"""

import copy
import io
import json
import os
from pathlib import Path

from lightning.pytorch.strategies import ModelParallelStrategy
from PIL import Image

from trainlab.data.base import ImageDataModule
from trainlab.data.worker_signals import init_worker
from trainlab.utils.errors import ConfigError, DataError
from trainlab.utils.logging import get_logger
from trainlab.utils.seeding import call_seeded, derived_seed, run_seed

try:
    from litdata import StreamingDataLoader, StreamingDataset
    from litdata.streaming.resolver import Dir
except ModuleNotFoundError as e:
    if not (e.name or "").startswith("litdata"):
        raise
    raise ConfigError(
        'data=stream needs the package litdata, not installed: pip install "litdata==0.2.76"'
    ) from e

log = get_logger(__name__)


class EncodedImages(StreamingDataset):
    """Shards of {"image": encoded bytes, "label": int} as (transformed image, label)."""

    def __init__(self, *args, image_transform, mode: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.image_transform, self.mode = image_transform, mode

    def __getitem__(self, index):
        item = super().__getitem__(index)
        image = Image.open(io.BytesIO(item["image"])).convert(self.mode)
        sample = getattr(index, "index", index)  # the global sample index
        seed = derived_seed(self.seed, self.current_epoch, sample)
        return call_seeded(seed, self.image_transform, image), item["label"]


class EpochStreamingDataLoader(StreamingDataLoader):
    """litdata's loader, resuming only the epoch its checkpoint was taken in, from exactly
    where it was taken.

    After ``load_state_dict`` litdata sets ``restore`` and clears it only when an iterator
    runs to exhaustion. Lightning stops after the epoch's last batch without exhausting it,
    so the next epoch "resumed" the finished one and yielded nothing. Here ``restore``
    applies to the first iterator after a load only.

    litdata's ``state_dict`` also rewrites the loaded state in place with this run's world
    size and its own count of samples yielded. A checkpoint saved between the load and the
    first batch (a resume that validates first) turned 2 ranks' 28 samples read into 1
    rank's 14, and the epoch read 14 samples twice. Until the first batch the loaded state
    is the position, so it is what ``state_dict`` returns.
    """

    _resuming = False
    _loaded: dict | None = None

    def load_state_dict(self, obj: dict) -> None:
        super().load_state_dict(obj)
        self._resuming = self.restore
        self._loaded = copy.deepcopy(obj)

    def state_dict(self) -> dict:
        return copy.deepcopy(self._loaded) if self._loaded is not None else super().state_dict()

    def __iter__(self):
        if not self._resuming:
            self.restore = False
            self._loaded = None
        self._resuming = False
        for batch in super().__iter__():
            self._loaded = None
            yield batch


class StreamDataModule(ImageDataModule):
    """``root`` holds train/ and val/ shards; val serves as validation and test split."""

    # No preflight batch (checks/preflight.py): the stream's datasets, built in setup, must be
    # built on each rank after the process group exists, not once on rank 0 before it.
    preflight_batch = False
    name = "stream"

    def __init__(
        self,
        cache_dir: str | None = None,
        max_cache_size: str = "50GB",
        endpoint_url: str | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.cache_dir, self.max_cache_size = cache_dir, max_cache_size
        # None: boto3 reads AWS_ENDPOINT_URL and the credentials from the environment.
        self.endpoint_url = endpoint_url

    @property
    def remote(self) -> bool:
        return str(self.root).startswith("s3://")

    def check_remote(self) -> None:
        """One HEAD request per split's index.json, with a 3 s connect timeout: a missing
        credential, an endpoint that does not answer or a wrong prefix is one line now, not
        a NoCredentialsError or a hang inside litdata's download threads later."""
        import boto3
        from botocore.config import Config
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            EndpointConnectionError,
            NoCredentialsError,
        )

        bucket, _, prefix = str(self.root).removeprefix("s3://").partition("/")
        endpoint = self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"
        timeouts = Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 1})
        # A new session: credentials are read from the environment now, not from a cache.
        session = boto3.session.Session()
        client = session.client("s3", endpoint_url=self.endpoint_url, config=timeouts)
        for split in ("train", "val"):
            key = f"{prefix.strip('/')}/{split}/index.json".lstrip("/")
            try:
                client.head_object(Bucket=bucket, Key=key)
            except NoCredentialsError:
                raise DataError(
                    f"no S3 credentials for {self.root}: set AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL for a store other than AWS)"
                ) from None
            except ClientError as e:
                code = e.response.get("Error", {}).get("Code", "")
                if code in ("404", "NoSuchKey", "NoSuchBucket"):
                    raise DataError(
                        f"no shards at s3://{bucket}/{key.rpartition('/')[0]} (index.json "
                        f"missing): upload the output of scripts/make_shards.py there"
                    ) from None
                raise DataError(f"{endpoint} refused s3://{bucket}/{key}: {code or e}") from None
            except (EndpointConnectionError, BotoCoreError) as e:
                raise DataError(
                    f"S3 endpoint {endpoint} does not answer ({type(e).__name__}): check "
                    "AWS_ENDPOINT_URL or data.endpoint_url and the network"
                ) from None

    def check(self) -> None:
        if self.remote:
            return self.check_remote()
        for split in ("train", "val"):
            if not (Path(self.root) / split / "index.json").is_file():
                raise DataError(
                    f"no shards at {self.root}/{split} (index.json missing): make them with "
                    f"python scripts/make_shards.py <image folder> {self.root}"
                )
        classes = Path(self.root) / "classes.json"
        found = len(json.loads(classes.read_text())) if classes.is_file() else self.num_classes
        if found != self.num_classes:
            raise DataError(
                f"{classes} lists {found} classes but data.num_classes={self.num_classes}: "
                "set data.num_classes to match"
            )

    def _split(self, split: str, train: bool) -> EncodedImages:
        source: str | Dir = f"{str(self.root).rstrip('/')}/{split}"
        if self.remote and self.cache_dir:
            source = Dir(path=os.path.join(self.cache_dir, split), url=source)
        options = {"endpoint_url": self.endpoint_url} if self.endpoint_url else None
        return EncodedImages(
            source,
            image_transform=self.transform(train=train),
            mode="L" if self.in_chans == 1 else "RGB",
            shuffle=train,
            drop_last=train or self._sharded_model(),
            seed=run_seed(),
            max_cache_size=self.max_cache_size,
            storage_options=options,
        )

    def _sharded_model(self) -> bool:
        """Under FSDP every forward is a collective, so every rank needs the same number of
        evaluation batches; litdata's evaluation split without drop_last (every sample
        exactly once, as under DDP) gives whole chunks per rank, unequal counts."""
        strategy = self.trainer.strategy if self.trainer else None
        if not isinstance(strategy, ModelParallelStrategy) or strategy.world_size < 2:
            return False
        log.warning(
            "data=stream under FSDP: evaluation drops a few samples so that every rank gets "
            "as many batches (val/test metrics then miss them); strategy=ddp evaluates all"
        )
        return True

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None:
            self.train_set = self._split("train", train=True)
            self.val_set = self.test_set = self._split("val", train=False)

    def eval_splits(self):
        raise DataError(
            "data=stream holds no val split apart from its test split, so frozen features "
            "cannot be rated on it without choosing on test: rate the checkpoint on an image "
            "folder with python eval.py mode=features ckpt_path=<ckpt> data=imagefolder "
            "data.root=<folder>"
        )

    def _stream_loader(self, dataset: EncodedImages, batch_size: int) -> StreamingDataLoader:
        return EpochStreamingDataLoader(
            dataset,
            batch_size=batch_size,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            worker_init_fn=init_worker,  # stop signals are the main process's
        )

    def train_dataloader(self) -> StreamingDataLoader:
        return self._stream_loader(self.train_set, self.batch_size)

    def val_dataloader(self) -> StreamingDataLoader:
        return self._stream_loader(self.val_set, self.eval_batch_size)

    def test_dataloader(self) -> StreamingDataLoader:
        return self._stream_loader(self.test_set, self.eval_batch_size)
