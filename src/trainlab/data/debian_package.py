"""A data set that Debian packages, fetched offline from the package mirror a machine already
uses: ``apt-get download <package>`` and ``dpkg-deb -x`` into a temporary folder, nothing
installed system-wide and no root needed. Fashion-MNIST's package holds the whole set
(60,000 + 10,000 images) as the four gzipped IDX files torchvision reads.

A part (docs/parts/debian_package.md): a data node names it as its ``fetch``
(configs/data/fetch/), and nothing else imports it. Written here because no library fetches a
Debian package's files; torchvision's own download needs the data set's hosts, which a
cluster's compute nodes often cannot reach.
"""

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from torchvision.datasets.utils import extract_archive

from trainlab.utils.logging import get_logger

log = get_logger(__name__)


class DebianPackage:
    """``fetch(target)`` unpacks ``package``'s gzipped files under ``inside``, un-gzipped,
    into ``target``; False (nothing written) where apt-get or dpkg-deb is missing or fails
    (no mirror, no such package)."""

    def __init__(self, package: str, inside: str):
        self.package, self.inside = package, inside

    def __str__(self) -> str:
        return f"Debian's {self.package} package"

    def __call__(self, target: Path) -> bool:
        if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
            return False
        start = time.perf_counter()
        log.info(f"fetching {self} into {target}")
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            work = Path(tmp).resolve()
            if not self._run(["apt-get", "download", self.package], cwd=work):
                return False
            deb = next(work.glob(f"{self.package}_*.deb"), None)  # <package>_<version>_all.deb
            if deb is None or not self._run(
                ["dpkg-deb", "-x", str(deb), str(work / "unpacked")], cwd=work
            ):
                return False
            staged = work / "files"
            staged.mkdir()
            for packed in sorted((work / "unpacked" / self.inside).glob("*.gz")):
                extract_archive(packed, staged)  # a .gz alone: un-gzipped into staged/
            target.mkdir(parents=True, exist_ok=True)
            for file in staged.iterdir():
                file.replace(target / file.name)  # each file whole: a second rank finds it complete
        log.info(f"{target} ready in {time.perf_counter() - start:.1f} s")
        return True

    def _run(self, command: list[str], cwd: Path) -> bool:
        """Whether ``command`` succeeded; its error's end logged where it did not."""
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
        if done.returncode != 0:
            log.info(
                f"{self.package}: {' '.join(command[:2])} failed: {done.stderr.strip()[-200:]}"
            )
        return done.returncode == 0
