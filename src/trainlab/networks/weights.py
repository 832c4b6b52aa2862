"""Import and export of encoder weights: official I-JEPA checkpoints, timm files, our own.

Everything is read with ``weights_only=True`` (or safetensors): a weights file from the
internet cannot run code on load.
"""

import functools
import os
import re
import zipfile
import zlib
from pathlib import Path

import torch

from trainlab.utils.errors import UserError
from trainlab.utils.files import not_a_file

# Official I-JEPA predictor names -> ours (trainlab.networks.predictor.Predictor).
PREDICTOR_KEYS = [
    (r"^predictor_embed\.", "embed."),
    (r"^predictor_blocks\.", "blocks."),
    (r"^predictor_norm\.", "norm."),
    (r"^predictor_proj\.", "proj."),
    (r"^predictor_pos_embed$", "pos_embed"),
]


@functools.cache
def _damaged_record(path: str, size: int, mtime_ns: int) -> str | None:
    """The first record whose CRC-32 fails, once a process per file as it is on disk (the
    checks before a run and the load after it read the same file)."""
    try:
        if not zipfile.is_zipfile(path):
            return None
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as error:
        return f"? ({error})"


def check_intact(path: str | Path) -> None:
    """Refuse a torch checkpoint whose bytes differ from those it was written with. torch
    saves a zip whose every record carries a CRC-32, and torch.load reads them without
    checking: 64 flipped bytes load silently as a wrong tensor. A file that is no zip
    (safetensors, torch's legacy format) has no checksums to check."""
    stat = os.stat(path)
    damaged = _damaged_record(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)
    if damaged is not None:
        raise UserError(
            f"checkpoint {path} is damaged: its record {damaged} does not match the CRC-32 "
            "it was written with; use another checkpoint (a step checkpoint) or copy it again"
        )


def read_state(path: str | Path) -> dict:
    path = Path(path)
    if what := not_a_file(path):
        raise UserError(f"weights file {path} {what}: check model.init_from")
    check_intact(path)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise UserError(f"cannot read weights from {path}: {why_unreadable(e)}") from None


def check_readable(path: str | Path) -> dict:
    """Refuse a checkpoint that is damaged (``check_intact`` reads it once, about a second a
    GB) or that ``weights_only`` loading cannot read, before any run starts. Loaded
    memory-mapped: returns what it read, its tensors still on disk until they are touched."""
    if what := not_a_file(path):
        raise UserError(f"checkpoint {path} {what}: give a checkpoint file")
    check_intact(path)
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap can only be used" not in str(e):
                raise
            return torch.load(path, map_location="cpu", weights_only=True)  # not a zip: read it
    except Exception as e:
        raise UserError(f"cannot read checkpoint {path}: {why_unreadable(e)}") from None


def check_fits(what: str, checkpoint: dict, model: torch.nn.Module) -> None:
    """Refuse a checkpoint (as ``check_readable`` read it) whose weights do not fit ``model``
    (another method, another shape) before a run loads it: Lightning's strict load fails
    only after the run dir has changed. Only names and shapes are read, not the tensors."""
    own, theirs = model.state_dict(), checkpoint.get("state_dict") or {}
    problems = {
        "missing": [k for k in own if k not in theirs],
        "unexpected": [k for k in theirs if k not in own],
        "of another shape": [k for k in own if k in theirs and own[k].shape != theirs[k].shape],
    }
    if found := [f"{len(ks)} {name}, e.g. {ks[0]}" for name, ks in problems.items() if ks]:
        raise UserError(
            f"{what} do not fit this model ({'; '.join(found)}): resume with the config the "
            "checkpoint was saved with"
        )


def why_unreadable(error: Exception) -> str:
    """What a failed ``torch.load(weights_only=True)`` means, in words a user can act on.

    torch's own messages end in a link to its docs, and a random file reads as "could
    run code"; these say which of the three it really was.
    """
    text = str(error)
    if "unsupported global" in text.lower():  # a class or function the pickle would call
        return (
            "it holds objects other than tensors and plain values, which could run code when "
            "loaded: not loaded (use a checkpoint written by train.py, or convert it)"
        )
    if isinstance(error, EOFError) or "failed finding central directory" in text:
        return "it is empty or truncated (an interrupted copy or download?): copy it again"
    return "it is not a PyTorch checkpoint: pass a .ckpt written by train.py"


def strip_prefix(state: dict, prefix: str = "module.") -> dict:
    return {k.removeprefix(prefix): v for k, v in state.items()}


def rename(state: dict, rules) -> dict:
    out = {}
    for key, value in state.items():
        for pattern, repl in rules:
            key = re.sub(pattern, repl, key)
        out[key] = value
    return out


def network_parts(state: dict) -> dict[str, dict]:
    """Split a weights file into {encoder, target_encoder, predictor, evaluated} state dicts
    in our names; ``evaluated`` is the network the method rates (SelfSupervised.evaluated).

    Accepts the official I-JEPA checkpoint (dicts under 'encoder', 'predictor',
    'target_encoder', keys with or without 'module.'), a timm encoder state dict (any family:
    loaded into both encoders), and a Lightning checkpoint of this project: a method's, or a
    classifier's, whose encoder is rated.
    """
    if "state_dict" in state:  # a trainlab Lightning checkpoint
        sd = state["state_dict"]
        # a classifier (supervised, probe or fine-tune) keeps its encoder under net.encoder
        classifier = any(k.startswith("net.encoder.") for k in sd)
        prefixes = {"encoder": "net.encoder" if classifier else "encoder"}
        prefixes |= {"target_encoder": "target_encoder", "predictor": "predictor"}
        parts = {
            name: {k[len(p) + 1 :]: v for k, v in sd.items() if k.startswith(p + ".")}
            for name, p in prefixes.items()
        }
        parts = {k: v for k, v in parts.items() if v}
        # Saved by SelfSupervised; older checkpoints: the target if there is one.
        evaluated = state.get("evaluated") or (
            "target_encoder" if "target_encoder" in parts else "encoder"
        )
        if evaluated in parts:
            parts["evaluated"] = parts[evaluated]
        return parts
    if "encoder" in state and isinstance(state["encoder"], dict):
        parts = {"encoder": strip_prefix(state["encoder"])}
        if "target_encoder" in state:
            parts["target_encoder"] = strip_prefix(state["target_encoder"])
        if "predictor" in state:
            parts["predictor"] = rename(strip_prefix(state["predictor"]), PREDICTOR_KEYS)
        parts["evaluated"] = parts.get("target_encoder", parts["encoder"])
        return parts
    encoder = strip_prefix(state)
    if not encoder or not all(isinstance(v, torch.Tensor) for v in encoder.values()):
        raise UserError(
            "unrecognised weights file: expected an I-JEPA, timm or trainlab checkpoint"
        )
    return {"encoder": encoder, "target_encoder": encoder, "evaluated": encoder}


def load_into(module: torch.nn.Module, state: dict, what: str) -> None:
    """Strict load with one readable line when shapes or names do not match the config."""
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as e:
        first = str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else str(e)
        raise UserError(
            f"the {what} weights do not fit the configured model ({first}): "
            "give model.encoder the checkpoint's family and shape (configs/model/encoder/)"
        ) from None


def export_encoder(ckpt_path: str | Path, out_path: str | Path, part: str = "evaluated") -> Path:
    """Write the ``evaluated`` network (or ``part``) of a trainlab checkpoint as a state dict
    that the timm model of its config loads as it is."""
    state = read_state(ckpt_path)
    parts = network_parts(state)
    encoder = parts.get(part)
    if not encoder:
        have = ", ".join(k for k in parts if k != "evaluated") or "none"
        raise UserError(
            f"{ckpt_path} holds no {part} weights (it has {have}): give --part one of those"
        )
    out_path = Path(out_path)
    partial = out_path.with_name(f".{out_path.name}.partial")  # renamed over: never half a file
    try:  # the output's folder is made only now, once the export is sure to be written
        out_path.parent.mkdir(parents=True, exist_ok=True)
        if out_path.suffix == ".safetensors":
            from safetensors.torch import save_file

            save_file({k: v.contiguous() for k, v in encoder.items()}, str(partial))
        else:
            torch.save(encoder, partial)
        os.replace(partial, out_path)
    except OSError as e:
        if partial.is_file():
            partial.unlink()
        raise UserError(
            f"cannot write {out_path}: {e.strerror or e}; choose another path"
        ) from None
    return out_path
