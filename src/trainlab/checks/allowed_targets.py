"""A config read from disk is data until it is judged whole: before any node of it is built,
every ``_target_`` in it must be a class or function that this project's own configs name,
or a class written in this package; and every interpolation may call only the resolvers
that return plain values. Anything else (``builtins.open``, ``os.system``, a class reached
through a trainlab module's imports, ``${oc.create:...}``) is refused in one line that names
the key.

Judging imports nothing: a target is compared as text with configs/ and with trainlab's
source files (trainlab.utils.source), and the only resolvers it may run are the ones below,
which neither import nor build. The allow-list is what configs/ write, so a new config group
extends it by existing. A composed config on the command line is the user's own code path
and is not judged here: only what comes from a run dir.
"""

from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError, InterpolationToMissingValueError
from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser
from omegaconf.grammar_parser import parse

from trainlab.utils.errors import ConfigError
from trainlab.utils.omegaconf_internals import dereference, is_interpolation, node_at, raw_value
from trainlab.utils.source import configured_targets, defines_class

# Resolvers a saved config may call: each returns a plain value and runs no named code.
# oc.select reads a key of the same config, judged whole like the rest. Left out: oc.create
# and oc.decode (they return new nodes, _target_ included), the oc.dict ones (not used by
# configs/), and any a fork registers.
DISK_RESOLVERS = frozenset(
    {
        "oc.env",
        "oc.select",
        "now",
        "hydra",
        "monitor",
        "monitor_mode",
        "count_classes",
        "folder_channels",
        "folder_size",
        "cpu_precision",
        "slurm_gpus",
        "patch",
        "scaled",
    }
)


def is_allowed(target: str) -> bool:
    """Named in configs/, or a class of this package. Not any function of it: one such as
    ``export_encoder(ckpt, out)`` writes wherever its arguments say."""
    return target in configured_targets() or defines_class(target)


def resolvers_in(text: str) -> list[str]:
    """The resolvers an OmegaConf string calls, nested ones included, read by OmegaConf's
    own grammar (not called)."""
    names, todo = [], [parse(text, parser_rule="configValue", lexer_mode="DEFAULT_MODE")]
    while todo:
        tree = todo.pop()
        if isinstance(tree, OmegaConfGrammarParser.InterpolationResolverContext):
            names.append(tree.resolverName().getText())
        todo.extend(tree.getChildren() if hasattr(tree, "getChildren") else ())
    return names


def _nodes(cfg, key: str = ""):
    """(dotted key, node) for every node in ``cfg``, unresolved, depth first."""
    yield key, cfg
    if is_interpolation(cfg):  # judged as text; its target is judged where it lives
        return
    if isinstance(cfg, DictConfig):
        children = [(str(k), node_at(cfg, k)) for k in cfg.keys()]
    elif isinstance(cfg, ListConfig):
        children = [(str(i), node_at(cfg, i)) for i in range(len(cfg))]
    else:
        return
    for k, node in children:
        yield from _nodes(node, f"{key}.{k}" if key else k)


def _refuse_resolvers(node, key: str, source: Path | str) -> None:
    text = raw_value(node)  # a container's content, or the text of an interpolation
    if not isinstance(text, str) or "${" not in text:
        return
    try:
        called = resolvers_in(text)
    except Exception:
        raise ConfigError(
            f"{source}: {key}={text!r} is not a valid interpolation (nothing was built)"
        ) from None
    for name in called:
        if name not in DISK_RESOLVERS:
            raise ConfigError(
                f"{source}: {key}={text!r} calls ${{{name}:...}}, which a run dir's config may "
                f"not (nothing was built): it may call {', '.join(sorted(DISK_RESOLVERS))}"
            )


def _refuse_target(node: DictConfig, key: str, source: Path | str) -> None:
    where = f"{key}._target_" if key else "_target_"
    try:
        target = node._target_  # an interpolation runs only DISK_RESOLVERS by now
    except Exception:  # a missing key, or a name the monitor resolver refuses unimported
        target = OmegaConf.to_container(node, resolve=False)["_target_"]
        raise ConfigError(
            f"{source}: {where}={target!r} does not resolve: a run dir's config names "
            "its classes plainly (nothing was built)"
        ) from None
    if not isinstance(target, str) or not is_allowed(target):
        raise ConfigError(
            f"{source}: {where}={target!r} is not a class trainlab's configs use, and "
            "a run dir's config may not name other code (nothing was built); if it is "
            "yours, name it in a config under configs/ and it is allowed"
        )


def check_targets(cfg, source: Path | str) -> None:
    """Refuse ``cfg`` (read from ``source``) unless every interpolation in it calls only
    DISK_RESOLVERS and every ``_target_``, at any depth, is allowed; an interpolated target
    counts as what it resolves to. The resolvers are judged first, everywhere, so that
    resolving a target runs nothing else."""
    nodes = list(_nodes(cfg))
    for key, node in nodes:
        _refuse_resolvers(node, key, source)
    for key, node in nodes:
        if isinstance(node, DictConfig) and not is_interpolation(node) and "_target_" in node:
            _refuse_target(node, key, source)
    for key, node in nodes:
        _refuse_broken(node, key, source)


def _refuse_broken(node, key: str, source: Path | str) -> None:
    """An interpolation to a key the config lacks: one line now, not a traceback mid-build.
    (A resolver that needs what only a run has, ``${hydra:...}`` in a script, is left.)"""
    if not is_interpolation(node):
        return
    try:
        dereference(node)
    except (InterpolationKeyError, InterpolationToMissingValueError) as e:
        raise ConfigError(
            f"{source}: {key}={raw_value(node)!r} does not resolve ({str(e).splitlines()[0]}): "
            "the config is damaged; restore it from its run"
        ) from None
    except Exception:
        pass
