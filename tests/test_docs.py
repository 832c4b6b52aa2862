"""The README is a front door and docs/ its rooms: every page is linked, every link lands,
and every `python train.py ...` / `python eval.py ...` they show still composes, as
`--cfg job` would (Hydra's own override parser and config composition, in this process).
The template apart from its notebook: no comment in src/ or configs/ cites an issue or a
search round, and src/trainlab holds no benchmark, search or results code. The Fashion-MNIST
numbers the README and docs/results.md show are the ones research/fashion_results.py last
wrote, so a new seed cannot leave a page behind. The core's reading order in docs/layout.md
names files that exist, with their lines."""

import re
import shlex

import pytest
from conftest import CONFIGS, ROOT
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from test_parts import parts

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
COMMAND = re.compile(r"python (train|eval)\.py([^`\n]*)")
NOT_OVERRIDES = {"-m", "--multirun", "--help", "--cfg", "job", "hydra", "--resolve", "..."}
PLACEHOLDER = re.compile(r"<[^>]*>")
# Shown as what is refused: each must fail to compose, with the line the page shows.
SHOWN_REFUSED = {
    ("train", ("data=mnst5k",)): "Could not find 'data/mnst5k'",
    ("train", ("trainer.max_epoch=3",)): "Could not override 'trainer.max_epoch'",
    ("train", ("key=a,b",)): "Could not override 'key'",
    ("train", ("experiment=vicreg_folder", "data.root=~/photos")): "LexerNoViableAltException",
}


def commands(text: str):
    """(entry, overrides) of every train.py / eval.py command in a page, in code blocks and
    inline code; continuation lines joined, comments and flags dropped. A placeholder in a
    path (`<run>`) stands for a name; a value that is only a placeholder (`model=<name>`) is
    the reader's choice and is left out."""
    text = text.replace("\\\n", " ")
    for match in COMMAND.finditer(text):
        args = match[2].split(" #", 1)[0].strip()
        tokens = [t for t in shlex.split(args) if t not in NOT_OVERRIDES and "=" in t]
        yield (
            match[1],
            [
                PLACEHOLDER.sub("name", t)
                for t in tokens
                if not PLACEHOLDER.fullmatch(t.split("=", 1)[1])
            ],
        )


def first_of_sweeps(overrides: list[str]) -> list[str]:
    """A multirun's sweep (`lr=1e-3,3e-4`) composes as its first job."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [
        f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}"
        if o.is_sweep_override()
        else o.input_line
        for o in parsed
    ]


def test_the_readme_is_a_front_door_and_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 400
    linked = {m for m in LINK.findall(readme)}
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in linked, f"README.md does not link docs/{page.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_lands_on_a_file(page):
    for target in LINK.findall(page.read_text()):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name} links {target}, which is not there"


def of_a_removed_part(overrides: list[str]) -> bool:
    """A command that chooses a config a part's line in docs/fork.md has removed (a fork
    without I-JEPA keeps the README's `experiment=ijepa` line until it edits the page)."""
    removed = {p for paths in parts().values() for p in paths if not (ROOT / p).exists()}
    chosen = (o.lstrip("+~").split("=", 1) for o in overrides if "=" in o)
    return any(f"configs/{group}/{name}.yaml" in removed for group, name in chosen)


def help_footer() -> str:
    """The examples `python train.py --help` ends with (configs/hydra/default.yaml)."""
    return OmegaConf.load(CONFIGS / "hydra" / "default.yaml").help.footer


def test_every_command_in_the_readme_and_docs_composes():
    seen, failed = set(), []
    texts = [(page.name, page.read_text()) for page in PAGES] + [("--help", help_footer())]
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        for name, text in texts:
            for entry, overrides in commands(text):
                if (entry, tuple(overrides)) in seen:
                    continue
                seen.add((entry, tuple(overrides)))
                shown = f"{name}: python {entry}.py {' '.join(overrides)}"
                if of_a_removed_part(overrides):
                    continue
                refused = SHOWN_REFUSED.get((entry, tuple(overrides)))
                try:
                    compose(entry, first_of_sweeps(overrides), return_hydra_config=True)
                except Exception as error:  # noqa: BLE001  every failure is listed below
                    if refused is None or refused not in str(error):
                        failed.append(f"{shown}: {str(error).splitlines()[0]}")
                else:
                    if refused:
                        failed.append(f"{shown}: composed, but the page shows it refused")
    assert len(seen) > 30  # the pages show that many; fewer means the reader missed them
    assert not failed, "\n".join(failed)


def test_help_names_the_default_jobs_method():
    """`python train.py --help` says what `python train.py` trains: the default model's class."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        method = compose("train").model._target_.rsplit(".", 1)[-1]
    (line,) = [
        x for x in help_footer().splitlines() if x.split("#")[0].strip() == "python train.py"
    ]
    assert method in line, line


HISTORY = re.compile(r"[Ii]ssue #?[0-9]+|[Rr]ounds? [0-9]+")


def test_no_comment_in_src_or_configs_cites_an_issue_or_a_search_round():
    """Comments say why; which issue or search round brought a line is in git and research/."""
    files = [*(ROOT / "src").rglob("*.py"), *CONFIGS.rglob("*.yaml")]
    cited = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not cited, "\n".join(cited)


def test_the_package_holds_no_benchmark_search_or_results_code():
    package = ROOT / "src" / "trainlab"
    names = [p.relative_to(package).as_posix() for p in package.rglob("*.py")]
    notebook = [n for n in names if re.search(r"bench|search|_results|recipe", n)]
    assert not notebook, notebook


MEAN = re.compile(r"(?<![\d.])(?<!± )\d+(?:\.\d+)?")  # a cell's numbers, less those after a ±


def table(text: str, first_header: str) -> dict[str, dict[str, list[str]]]:
    """{row name: {column: the cell's means}} of the markdown table whose header starts with
    `first_header`; a row is named by its first cell up to any " (" that annotates it."""
    lines = text[text.index(f"| {first_header}") :].split("\n")
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        means = {h: MEAN.findall(c) for h, c in zip(header[1:], cells[1:], strict=True)}
        rows[cells[0].split(" (")[0]] = means
    return rows


def test_the_readme_and_docs_show_the_fashion_numbers_the_script_last_wrote():
    written = table((ROOT / "research/fashion_results.md").read_text(), "encoder")
    docs = table((ROOT / "docs/results.md").read_text(), "Fashion-MNIST, test")
    readme = table((ROOT / "README.md").read_text(), "Fashion-MNIST, test")
    assert docs.keys() == written.keys()
    assert readme.keys() <= written.keys() and len(readme) >= 10
    for shown in (docs, readme):
        for row, cells in shown.items():
            for column, means in cells.items():
                assert means == written[row][column], (row, column)


def test_slurm_writes_its_log_into_a_folder_every_clone_has():
    """SLURM opens ``--output`` before the script runs: a folder the script would make
    itself (logs/slurm/) is not there on the first submission, which then fails unlogged."""
    text = (ROOT / "scripts" / "slurm.sbatch").read_text()
    output = re.search(r"^#SBATCH --output=(\S+)", text, re.MULTILINE)[1]
    folder = (ROOT / output).parent
    tracked = {p.parent for p in ROOT.joinpath("logs").glob(".gitkeep")}  # .gitignore keeps it
    assert folder in tracked, f"{output}: {folder} is not a folder of a fresh clone"


def test_the_cores_reading_order_names_files_that_exist_and_counts_their_lines():
    """docs/layout.md's reading order: every file it names is there, and the lines it says
    they hold are their lines today, within 10 %."""
    text = (ROOT / "docs" / "layout.md").read_text()
    start = text.index("**Reading the core in an hour.**")
    section = text[start : text.index("\n\n", text.index("| 1 |", start))]
    said = int(re.search(r"about ([\d,]+) lines", section)[1].replace(",", ""))
    rows = [line.split("|")[2] for line in section.splitlines() if re.match(r"\| \d ", line)]
    files = [
        ROOT / name if name.startswith("configs/") else ROOT / "src" / "trainlab" / name
        for row in rows
        for name in re.findall(r"`([^`]+\.(?:py|yaml))`", row)
    ]
    assert len(files) >= 20, files
    missing = [str(f) for f in files if not f.is_file()]
    assert not missing, missing
    lines = sum(len(f.read_text().splitlines()) for f in files)
    assert abs(lines - said) <= 0.1 * said, f"the page says about {said} lines; they hold {lines}"
