"""A config read from disk is data: before it reaches ``hydra.utils.instantiate``, every
``_target_`` in it must be a class or function that this project's own configs name, or a
class of this package. Anything else (``builtins.open``, ``os.system``, ``subprocess.run``) is
refused in one line that names the key and the target.

The allow-list is derived from configs/ (every ``_target_`` written there), so a new config
group extends it by existing; nothing is typed twice. A composed config on the command line
is the user's own code path and is not checked here: only what comes from a run dir.
"""

import functools
import inspect
import re
from pathlib import Path

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf

from trainlab.utils.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
OWN_PACKAGES = ("trainlab.", "hydra_plugins.trainlab_")
TARGET_LINE = re.compile(r"^\s*_target_:\s*([\w.]+)\s*$", re.MULTILINE)


@functools.cache
def allowed_targets() -> frozenset[str]:
    """Every ``_target_`` written in configs/."""
    return frozenset(
        match for path in CONFIGS.rglob("*.yaml") for match in TARGET_LINE.findall(path.read_text())
    )


def is_allowed(target: str) -> bool:
    """Named in configs/, or a class of this package. Not any function of it: one such as
    ``export_target_encoder(ckpt, out)`` writes wherever its arguments say."""
    if target in allowed_targets():
        return True
    if not target.startswith(OWN_PACKAGES):
        return False
    try:
        return inspect.isclass(get_object(target))  # imports this package's module only
    except Exception:
        return False


def check_targets(cfg, source: Path | str, key: str = "") -> None:
    """Refuse ``cfg`` (read from ``source``) if any ``_target_`` in it, at any depth, is not
    allowed. An interpolated target counts as what it resolves to; one that does not resolve
    is refused too."""
    if isinstance(cfg, DictConfig):
        if "_target_" in cfg:
            where = f"{key}._target_" if key else "_target_"
            try:
                target = cfg._target_
            except Exception:  # an interpolation that does not resolve
                target = OmegaConf.to_container(cfg, resolve=False)["_target_"]
                raise ConfigError(
                    f"{source}: {where}={target!r} does not resolve: a run dir's config names "
                    "its classes plainly"
                ) from None
            if not isinstance(target, str) or not is_allowed(target):
                raise ConfigError(
                    f"{source}: {where}={target!r} is not a class trainlab's configs use, and "
                    "a run dir's config may not name other code (nothing was built); if it is "
                    "yours, name it in a config under configs/ and it is allowed"
                )
        items = ((k, cfg._get_node(k)) for k in cfg.keys())
    elif isinstance(cfg, ListConfig):
        items = ((i, cfg._get_node(i)) for i in range(len(cfg)))
    else:
        return
    for k, node in items:
        if isinstance(node, (DictConfig, ListConfig)):
            check_targets(node, source, f"{key}.{k}" if key else str(k))
