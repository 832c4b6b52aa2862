"""What a run prints for people: the config tree at start, progress bars on a terminal, a
summary table at the end."""

from collections.abc import Mapping, Sequence

import rich
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table
from rich.tree import Tree

FIRST = ("data", "model", "trainer", "strategy", "callbacks", "logger", "paths")


def print_config_tree(cfg: DictConfig, resolve: bool = False) -> None:
    """The composed config, one branch per group, main groups first."""
    tree = Tree("config", style="bold")
    keys = [k for k in FIRST if k in cfg] + [k for k in cfg if k not in FIRST and k != "hydra"]
    for key in keys:
        value = cfg[key]
        text = (
            OmegaConf.to_yaml(value, resolve=resolve)
            if isinstance(value, DictConfig)
            else str(value)
        )
        tree.add(f"[bold]{key}[/bold]").add(Syntax(text, "yaml", theme="ansi_dark"))
    rich.print(tree)


def bars_shown() -> bool:
    """Whether progress bars draw: on a terminal. Elsewhere (a pipe, a log file) rich's
    transient bar leaves a blank line, and nothing else."""
    return rich.get_console().is_terminal


def _fmt(value) -> str:
    """A cell: floats to 4 digits, nothing (None) as "-", as a key a run does not set."""
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def print_unfolded(title: str, table: Table) -> None:
    """A title line, then the table at its natural width, wider than the console where it
    must be: a path folded over two lines cannot be copied, nor a column of many folded to a
    letter per line read (rich folds a table's own title to the table's width, too). Long
    lines stay greppable in a log."""
    console = rich.get_console()
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    if natural > console.width:
        console = Console(width=natural)
    console.print(title, soft_wrap=True, highlight=False)
    console.print(table)


def print_summary(title: str, rows: Mapping[str, object]) -> None:
    table = Table(show_header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for key, value in rows.items():
        table.add_row(key, _fmt(value))
    print_unfolded(title, table)


def print_jobs(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    table = Table()
    for name in header:
        table.add_column(name)
    for row in rows:
        table.add_row(*(_fmt(v) for v in row))
    print_unfolded(title, table)
