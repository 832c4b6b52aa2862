"""A run dir's YAML files (config.yaml, overrides.yaml) read as data that may have been
copied from anyone: their size and their aliases are checked before they are parsed into a
config, in one line and well under a second.

A YAML alias repeats a whole node, so a few hundred bytes of nested aliases expand to
billions of nodes ("billion laughs"): OmegaConf would build them all at 100 % CPU. A saved
config holds no alias (OmegaConf writes none), and a run's config is a few kilobytes.
"""

from pathlib import Path

import yaml
from omegaconf import OmegaConf

from trainlab.utils.errors import ConfigError
from trainlab.utils.files import not_a_file

MAX_BYTES = 1 << 20  # 1 MiB: a run's config.yaml is about 10 KB
MAX_ALIASES = 16  # none are written; a few are allowed for a hand-edited file
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where present


def read_run_yaml(path: Path):
    """``path`` as an OmegaConf config, refused (ConfigError) if it is larger than MAX_BYTES,
    holds more than MAX_ALIASES aliases, or is not UTF-8 YAML."""
    path = Path(path)
    if what := not_a_file(path):
        raise ConfigError(f"{path} {what}: a run dir's YAML must be a file")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise ConfigError(
            f"{path} is {size / 2**20:.1f} MiB, over the {MAX_BYTES >> 20} MiB a run's YAML "
            "may take: not read (a run writes about 10 KB); copy the run dir again"
        )
    try:
        text = path.read_text(encoding="utf-8")
        aliases = 0
        for event in yaml.parse(text, Loader=_Loader):  # events only: nothing expanded
            aliases += isinstance(event, yaml.AliasEvent)
            if aliases > MAX_ALIASES:
                raise ConfigError(
                    f"{path} holds more than {MAX_ALIASES} YAML aliases (*name), which can "
                    "expand to billions of nodes: not read (a run writes none)"
                )
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from e
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"{path} is not valid YAML{line}: {getattr(e, 'problem', e)}") from e
    return OmegaConf.create(text)
