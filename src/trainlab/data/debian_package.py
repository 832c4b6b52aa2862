"""Data sets that Debian packages, fetched offline from the package mirror a machine already
uses: ``apt-get download <package>`` and ``dpkg-deb -x`` into a temporary folder, nothing
installed system-wide and no root needed. Fashion-MNIST's package holds the whole set
(60,000 + 10,000 images) as the four gzipped IDX files torchvision reads.

Written here because no library fetches a Debian package's files; torchvision's own
download needs the data set's hosts, which a cluster's compute nodes often cannot reach.
"""

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from torchvision.datasets.utils import extract_archive

from trainlab.utils.logging import get_logger

log = get_logger(__name__)

# data set: (Debian package, the folder of its files inside the package)
PACKAGES = {"fashion_mnist": ("dataset-fashion-mnist", "usr/share/datasets/fashion-mnist")}


def fetch(dataset: str, target: Path) -> bool:
    """Unpack ``dataset``'s package files, un-gzipped, into ``target``; False (nothing
    written) where apt-get or dpkg-deb is missing or fails (no mirror, no such package)."""
    package, inside = PACKAGES[dataset]
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        return False
    start = time.perf_counter()
    log.info(f"{dataset}: fetching Debian's {package} (about 31 MB) into {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        work = Path(tmp).resolve()
        if not _run(dataset, ["apt-get", "download", package], cwd=work):
            return False
        deb = next(work.glob(f"{package}_*.deb"), None)  # <package>_<version>_all.deb
        if deb is None or not _run(
            dataset, ["dpkg-deb", "-x", str(deb), str(work / "unpacked")], cwd=work
        ):
            return False
        staged = work / "files"
        staged.mkdir()
        for packed in sorted((work / "unpacked" / inside).glob("*.gz")):
            extract_archive(packed, staged)  # a .gz alone: un-gzipped into staged/
        target.mkdir(parents=True, exist_ok=True)
        for file in staged.iterdir():
            file.replace(target / file.name)  # each file whole: a second rank finds it complete
    log.info(f"{dataset}: {target} ready in {time.perf_counter() - start:.1f} s")
    return True


def _run(dataset: str, command: list[str], cwd: Path) -> bool:
    """Whether ``command`` succeeded; its error's end logged where it did not."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        log.info(f"{dataset}: {' '.join(command[:2])} failed: {done.stderr.strip()[-200:]}")
    return done.returncode == 0
