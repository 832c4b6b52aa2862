"""Where a run lives: one decision for train.py, eval.py and multirun sweep dirs, made before
Hydra creates any folder and before torch is imported.

A run dir lies inside ``paths.log_dir``, is named by plain names (``task_name``, and
``run_name`` as one name or a path of names), and is neither inside nor above another run's
dir (a folder holding the ``meta.json`` every run writes at start). A sweep dir follows the
same rules and, unless its sweeper continues a study there, holds no runs yet. Anything else
is one line and exit 2, with nothing written.

Hydra creates the run dir before the task starts, and writes a sweep's ``multirun.yaml``
before its first job, so the decision is a Hydra callback: ``on_run_start`` and
``on_multirun_start`` come before both. Hydra turns a callback's exception into a warning,
so a refusal exits here.
"""

import sys
from pathlib import Path

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict

from trainlab.run.run_dir import LOCK_FILE, RESULT_FILES, RUN_MARKER, note_new_folders
from trainlab.utils.errors import ConfigError, UserError
from trainlab.utils.files import home_path

FORBIDDEN_CHARACTERS = set('/\\:*?"<>|') | {chr(c) for c in range(32)}


def check_name(key: str, name: object, nested: bool = False) -> None:
    """A plain folder name (or, ``nested``, a path of plain names joined by ``/``)."""
    parts = str(name).split("/") if nested else [str(name)]
    what = "a name or a path of names like a/b" if nested else "a plain name"
    if name is None or str(name) == "":
        raise ConfigError(f"{key} is empty: give it {what}, e.g. {key}=my_run")
    if str(name).startswith("/"):
        raise ConfigError(
            f"{key}={name} is an absolute path: give {what}; runs go under paths.log_dir "
            "(set paths.log_dir to put them elsewhere)"
        )
    for part in parts:
        if len(part.encode()) > 255:
            raise ConfigError(
                f"{key} has a name of {len(part)} characters ({part[:40]}...), longer than "
                f"the file system allows (255 bytes): choose a shorter {key}"
            )
        if part in ("", ".", "..") or FORBIDDEN_CHARACTERS & set(part):
            raise ConfigError(
                f"{key}={name} is not {what}: use letters, digits and -_.+=, (no '..', "
                f"no empty part{', no /' if not nested else ''})"
            )


def check_log_dir(log_dir: Path) -> Path:
    """``paths.log_dir`` resolved; refused if it, or a folder above it, is a file."""
    for folder in (log_dir, *log_dir.parents):
        if folder.exists() and not folder.is_dir():
            raise ConfigError(
                f"paths.log_dir={log_dir} cannot hold runs: {folder} is a file; point "
                "paths.log_dir at a folder"
            )
    return log_dir.resolve()


def other_run_around(folder: Path) -> tuple[str, Path] | None:
    """("inside", run) for a run dir above ``folder``, ("above", run) for one below it."""
    for parent in folder.parents:
        if (parent / RUN_MARKER).is_file():
            return "inside", parent
    if folder.is_dir():
        for marker in folder.rglob(RUN_MARKER):
            if marker.parent != folder:
                return "above", marker.parent
    return None


def check_place(key: str, value: object, folder: Path, log_dir: str, given: bool) -> Path:
    """``folder`` (a run or sweep dir, set by ``key=value``) resolved, if it is neither inside
    nor above another run and, unless the command line ``given`` the dir itself (then it is
    the user's choice), lies inside the log dir."""
    for name, path in (("paths.log_dir", log_dir), (key, value)):
        if fix := home_path(name, str(path)):  # before Hydra makes a folder named ~ here
            raise ConfigError(fix)
    try:
        return _check_place(key, value, folder, log_dir, given)
    except OSError as e:  # a path the file system cannot hold (over PATH_MAX, 4096 bytes)
        raise ConfigError(
            f"{key}={str(value)[:60]}... cannot be a folder here ({e.strerror}: "
            f"{len(str(folder).encode())} bytes of path): choose a shorter {key}"
        ) from None


def _check_place(key: str, value: object, folder: Path, log_dir: str, given: bool) -> Path:
    root = check_log_dir(Path(log_dir))
    place = folder.resolve()
    run = (
        root
        if (root / RUN_MARKER).is_file()
        else next((p for p in root.parents if (p / RUN_MARKER).is_file()), None)
    )
    if run is not None:  # a link into a run, or a path through one and back with ..
        raise ConfigError(
            f"paths.log_dir={log_dir} lies in the run dir {run}: a run's dir holds only "
            "itself; point paths.log_dir at a folder outside every run"
        )
    if not given and (place == root or not place.is_relative_to(root)):
        raise ConfigError(
            f"{key}={value} is not inside paths.log_dir={log_dir}: runs live in their log "
            "root; set paths.log_dir to move the root, and run_name to name the run"
        )
    if (around := other_run_around(place)) is not None:
        where, run = around
        raise ConfigError(
            f"{key}={value} puts this run {where} the run dir {run}: a run's dir holds only "
            f"itself; choose another {key}"
        )
    return place


def place_run(config: DictConfig) -> Path:
    """The run dir of a single run (``hydra.run.dir``), refused unless it is a fit place."""
    check_name("task_name", config.get("task_name"))
    check_name("run_name", config.get("run_name"), nested=True)
    given = any(o.startswith("hydra.run.dir=") for o in config.hydra.overrides.hydra)
    key = "hydra.run.dir" if given else "run_name"
    run_dir = Path(config.hydra.run.dir)
    value = run_dir if given else config.run_name
    return check_place(key, value, run_dir, config.paths.log_dir, given)


def continues_its_dir(sweeper: str | None) -> bool:
    """Whether a sweeper continues its own study in its sweep dir (its class says so with
    ``continues_its_dir``, as the Optuna part's does). Hydra has imported every sweeper
    plugin before this runs."""
    try:
        return bool(getattr(hydra.utils.get_class(sweeper), "continues_its_dir", False))
    except Exception:  # noqa: BLE001  no such class: the sweeper's own start says so
        return False


def place_sweep(config: DictConfig) -> Path:
    """The sweep dir of a multirun (``hydra.sweep.dir``): a fit place that holds no runs yet,
    unless its sweeper continues a study there."""
    check_name("task_name", config.get("task_name"))
    sweep_dir = Path(config.hydra.sweep.dir)
    if not continues_its_dir(config.hydra.sweeper.get("_target_")):
        used = [p for name in (*RESULT_FILES, LOCK_FILE) for p in sweep_dir.glob(f"*/{name}")]
        if used:
            raise ConfigError(
                f"sweep dir {sweep_dir} already holds runs "
                f"({used[0].relative_to(sweep_dir)}{' and more' if len(used) > 1 else ''}): "
                "its results stay as they are; give the sweep another hydra.sweep.dir"
            )
        given = any(o.startswith("hydra.sweep.dir=") for o in config.hydra.overrides.hydra)
        return check_place("hydra.sweep.dir", sweep_dir, sweep_dir, config.paths.log_dir, given)
    root = check_log_dir(Path(config.paths.log_dir))
    place = sweep_dir.resolve()
    if place == root or not place.is_relative_to(root):
        raise ConfigError(f"hydra.sweep.dir={sweep_dir} is not inside paths.log_dir={root}")
    return place


def place_job(config: DictConfig, number: int) -> Path:
    """A sweep job's dir (``hydra.sweep.dir`` / ``hydra.sweep.subdir``, as Hydra will make
    it for job ``number``), refused unless it lies inside its sweep dir and neither inside
    nor above another run: the sweep dir's own check says nothing of where a subdir leads."""
    with open_dict(config):
        config.hydra.job.num = number
    sweep_dir = Path(config.hydra.sweep.dir)
    subdir = str(config.hydra.sweep.subdir)
    place = (sweep_dir / subdir).resolve()
    if (around := other_run_around(place)) is not None:
        where, run = around
        raise ConfigError(
            f"hydra.sweep.subdir={subdir} puts job {number} {where} the run dir {run}: a "
            "run's dir holds only itself; choose another hydra.sweep.subdir"
        )
    if place == sweep_dir.resolve() or not place.is_relative_to(sweep_dir.resolve()):
        raise ConfigError(
            f"hydra.sweep.subdir={subdir} puts job {number} at {place}, outside its sweep dir "
            f"{sweep_dir}: give a subdir inside it (Hydra's default: ${{hydra.job.num}})"
        )
    return place


def refuse(error: UserError) -> None:
    print(f"error: {error}", file=sys.stderr, flush=True)
    sys.exit(error.exit_code)


class Placement(Callback):
    """Runs ``place_run`` and ``place_sweep`` before Hydra creates the dirs they judge."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        try:
            note_new_folders(place_run(config))
        except UserError as error:
            refuse(error)

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        try:
            place_sweep(config)
        except UserError as error:
            refuse(error)
