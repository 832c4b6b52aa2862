"""Every private name of Hydra the project uses, in one place. Checked on hydra-core
1.3.8; tests/test_library_internals.py fails when one of them moves.

Hydra's basic sweeper is a private class (``hydra._internal``): the checked sweeper extends
it, so that Hydra's own grid expansion, batching and sweep config keep their behaviour.
"""

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

CHECKED_ON = ("1.3.8", "1.3.8")


class BasicSweeperHooks(BasicSweeper):
    """Hydra's basic sweeper with the parse of ``hydra.sweeper.params`` under a public name."""

    def sweep_params_overrides(self) -> list[str]:
        """``hydra.sweeper.params`` as override strings (``key=a,b``)."""
        return self._parse_config()
