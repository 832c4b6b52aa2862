"""Every private name of OmegaConf the project uses, in one place. Checked on omegaconf
2.3.1; tests/test_library_internals.py fails when one of them moves.

The config checks read a config from disk as text before anything in it runs: an
interpolation is judged by what it says, not by what resolving it would do (resolving runs
resolvers). OmegaConf's public API resolves on access (``cfg[key]``, ``to_container``), and
``OmegaConf.is_interpolation`` needs the parent and key; these reach a node as it is.
"""

from typing import Any

CHECKED_ON = ("2.3.1", "2.3.1")


def node_at(node, key) -> Any:
    """The node at ``key`` (a DictConfig's key or a ListConfig's index), unresolved."""
    return node._get_node(key)


def is_interpolation(node) -> bool:
    return node._is_interpolation()


def raw_value(node) -> Any:
    """A container's content, or an interpolation's text, without resolving it."""
    return node._value()


def dereference(node) -> Any:
    """The node an interpolation points at (raises if it points at nothing)."""
    return node._dereference_node()
