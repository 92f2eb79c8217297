"""Resuming a fit (``lucid fit --ckpt_path``): the run's own config, and flags that contradict it.

A fit writes the config that started it to ``<run>/config.yaml`` (`lucid_train.cli.app.RunConfig`).
A resume reads it back (a run written before there was one: the checkpoint's hyper-parameters)
and adds the flags given now; a given flag that sets a saved key to another value is refused in
one line naming both values (assumptions.md T73).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonargparse import Namespace, get_loader
from lightning.pytorch.cli import LightningArgumentParser

from lucid_train.errors import LucidError
from lucid_train.run.last_checkpoint import LAST_NAME
from lucid_train.run.trainer import run_dir_of_checkpoint
from lucid_train.tasks.module import SCHEMA_ARGUMENTS
from lucid_train.weights.checkpoint_file import (
    CheckpointError,
    CheckpointInfo,
    read_checkpoint_info,
)

__all__ = [
    "CONFIG_FILE",
    "RESUME_FREE",
    "Resume",
    "ResumeConflictError",
    "check_resumed_module",
    "latest_last_checkpoint",
    "resume_argv",
]

CONFIG_FILE = "config.yaml"  # in the run folder: the config a fit was started with
# Keys of a run's config that may differ when it is resumed.
RESUME_FREE = ("ckpt_path", "config", "print_config")


class ResumeConflictError(LucidError, ValueError):
    """A flag given with ``--ckpt_path`` contradicts the config of the run it resumes."""


@dataclass(frozen=True)
class Resume:
    """A fit resumed from a checkpoint: the checkpoint and the run folder it belongs to."""

    checkpoint: CheckpointInfo
    run_dir: Path


def latest_last_checkpoint(run_root: Path) -> Path:
    """``--ckpt_path last``: the ``last.ckpt`` of the run under ``run_root``
    (``<root>/<task>/<name>/checkpoints/``) written most recently, as the authors' ``resume``
    takes their latest run's ``last.pt``."""
    found = sorted(run_root.glob(f"*/*/checkpoints/{LAST_NAME}"), key=lambda p: p.stat().st_mtime)
    if not found:
        others = sorted(run_root.glob("*/*/checkpoints/*.ckpt"), key=lambda p: p.stat().st_mtime)
        hint = (
            f"; the newest other checkpoint there is {others[-1]}: pass it as --ckpt_path to "
            "resume from it"
            if others
            else ""
        )
        raise CheckpointError(
            f"--ckpt_path last: no run under {run_root} has a checkpoints/last.ckpt; pass the "
            "checkpoint's path (runs/<task>/<name>/checkpoints/last.ckpt), or the --run.root "
            f"the run was written under{hint}"
        )
    return found[-1]


def resume_argv(
    parser: LightningArgumentParser, argv: list[str], given: Namespace
) -> tuple[Resume, list[str]]:
    """The resumed run and the command line of its fit: its run's ``config.yaml`` (a run
    written before there was one: the checkpoint's hyper-parameters) and the given flags, after
    refusing a given flag that contradicts it.

    Raises:
        ResumeConflictError: a given flag contradicts the run's config.
    """
    info = read_checkpoint_info(given.fit.ckpt_path)
    run_dir = run_dir_of_checkpoint(info.path)
    verb_at = argv.index("fit")
    flags = argv[verb_at + 1 :]
    saved_file = run_dir / CONFIG_FILE
    keys = _given_keys(flags)
    if "run.root" in keys and _same(given.fit.get("run.root"), run_dir.parent.parent):
        # the root the run lies under now (``--ckpt_path last`` needs it): a moved or copied
        # run folder resumes where it is, whatever root its config.yaml was started with
        keys = [k for k in keys if k != "run.root"]
    if saved_file.is_file():
        source = saved_file
        saved = dict(parser.parse_args(["fit", "--config", str(saved_file)]).fit.items())
        resumed = ["fit", "--config", str(saved_file), *flags]
        named = str(saved.get("model.model") or info.model)
        if named != info.model:
            raise ResumeConflictError(
                f"resuming {run_dir}: its {CONFIG_FILE} names the model {named}, but the "
                f"checkpoint {info.path} holds {info.model}; restore the config's model, or "
                f"start a new run from these weights (--model.weights {info.path})"
            )
    else:
        source = info.path
        saved = _checkpoint_settings(info, given.fit)
        resumed = [*argv, "--config", json.dumps(_nested(saved))]
        if not any(k == "data" or k.startswith("data.root") for k in keys):
            raise ResumeConflictError(
                f"resuming {run_dir}: its {CONFIG_FILE} (the settings the run was started "
                "with) is missing and the checkpoint does not name the data; restore the file, "
                "or give --data.root and the run's other settings again"
            )
    found = _conflicts(keys, given.fit, saved)
    if found:
        shown = ", ".join(f"--{k} {_show(a)} contradicts {k}: {_show(b)}" for k, a, b in found)
        raise ResumeConflictError(
            f"resuming {run_dir}: {shown} in {source}, the config the run was started with; "
            "drop the flag to resume the run as it was started, or start a new run (without "
            "--ckpt_path)"
        )
    if source == info.path and os.environ.get("LOCAL_RANK", "0") == "0":
        print(
            f"lucid fit: resuming {run_dir} without its {CONFIG_FILE}: the model, canvas and "
            "accumulation come from the checkpoint, every other setting from this command "
            "line and the defaults",
            file=sys.stderr,
        )
    return Resume(info, run_dir), resumed


def _given_keys(flags: Sequence[str]) -> list[str]:
    """The config keys a command line sets: its ``--key`` flags and the keys of its
    ``--config`` files (nested keys joined by dots; a class path's arguments count as one)."""
    keys: list[str] = []
    for i, token in enumerate(flags):
        if not token.startswith("-") or token == "-":
            continue
        name, eq, value = token.lstrip("-").partition("=")
        name = name.rstrip("+")  # --trainer.callbacks+=...
        if name in ("c", "config"):
            value = value if eq else (flags[i + 1] if i + 1 < len(flags) else "")
            path = Path(value)
            text = path.read_text() if path.is_file() else value
            keys.extend(_nested_keys(get_loader("yaml")(text)))
        elif name not in RESUME_FREE:
            keys.append(name)
    return keys


def _nested_keys(doc: Any, prefix: str = "") -> list[str]:
    if not isinstance(doc, dict) or "class_path" in doc or not doc:
        return [prefix] if prefix else []
    return [k for key, value in doc.items() for k in _nested_keys(value, f"{prefix}{key}.")]


def _conflicts(
    keys: Sequence[str], given: Namespace, saved: dict[str, Any]
) -> list[tuple[str, Any, Any]]:
    """``(key, given value, saved value)`` for each key of ``saved`` (dotted, one per value) that
    a given key sets (the key itself, a group above it or a value inside it) to another value."""
    found = []
    for key, value in saved.items():
        if key.split(".")[-1].startswith("__") or key in RESUME_FREE:
            continue
        hit = any(k == key or key.startswith(f"{k}.") or k.startswith(f"{key}.") for k in keys)
        if hit and key in given and not _same(given[key], value):
            found.append((key, given[key], value))
    return found


def _same(given: Any, saved: Any) -> bool:
    """Whether a given value is the saved one: equal, or two spellings of one existing file or
    folder (``data`` and ``/work/data`` from /work) rather than a contradiction."""
    if given == saved:
        return True
    paths = (str, os.PathLike)
    if not (isinstance(given, paths) and isinstance(saved, paths)):
        return False
    a, b = Path(given), Path(saved)
    return a.exists() and b.exists() and a.resolve() == b.resolve()


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1}`` -> ``{"a": {"b": 1}}``."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *groups, name = key.split(".")
        node = out
        for group in groups:
            node = node.setdefault(group, {})
        node[name] = value
    return out


def _checkpoint_settings(info: CheckpointInfo, given: Namespace) -> dict[str, Any]:
    """The fit settings a checkpoint's hyper-parameters hold, as config keys: the module's
    arguments, its canvas (``data.img_size``) and accumulation."""
    hp = info.hyper_parameters
    out = {f"model.{k}": v for k, v in hp.items() if f"model.{k}" in given}
    for key in ("model.img_size", "model.accumulate", *(f"model.{k}" for k in SCHEMA_ARGUMENTS)):
        out.pop(key, None)  # link targets and the data's schema
    if "img_size" in hp:
        out["data.img_size"] = hp["img_size"]
    if "accumulate" in hp:
        out["trainer.accumulate_grad_batches"] = hp["accumulate"]
    return out


def _show(value: Any) -> str:
    if isinstance(value, Namespace):
        value = value.as_dict()
    return value if isinstance(value, str) else json.dumps(value, default=str)


# Arguments a resumed module may hold otherwise than its checkpoint, each said in a line: names
# only (the data renamed a class); every other difference changes what the run trains.
RENAMES = ("class_names", "keypoint_names")


def check_resumed_module(resume: Resume, hparams: Mapping[str, Any]) -> None:
    """Compare the module a resume built (its run's config.yaml and the data) with the one its
    checkpoint trained: a renamed class is said in one line; any other difference (a canvas
    edited into config.yaml, another flip index) is refused. A resume from a checkpoint older
    than the run's ``last.ckpt`` says which epochs it trains again.

    Raises:
        ResumeConflictError: an argument differs from the checkpoint's.
    """
    info, said = resume.checkpoint, []
    for key, trained in info.hyper_parameters.items():
        if key in ("weights", "task") or key not in hparams:
            continue
        now = hparams[key]
        if _plain(now) == _plain(trained):
            continue
        if key not in RENAMES:
            raise ResumeConflictError(
                f"resuming {resume.run_dir}: the model's {key} is {_show(now)} (its "
                f"{CONFIG_FILE} or data), but {info.path} trained with {_show(trained)}; restore "
                f"it, or start a new run from those weights (--model.weights {info.path})"
            )
        said.append(f"{key} {_show(now)} (trained as {_show(trained)})")
    if os.environ.get("LOCAL_RANK", "0") != "0":
        return  # rank 0 says it (and reads last.ckpt for it)
    if said:
        print(f"lucid fit: the data renames {'; '.join(said)}: the run goes on under the new "
              "names", file=sys.stderr)  # fmt: skip
    last = info.path.parent / LAST_NAME
    later = _epoch_of(last) if info.path.name != LAST_NAME and last.is_file() else None
    if later is not None and info.epoch is not None and later > info.epoch:
        print(
            f"lucid fit: {info.path.name} holds epoch {info.epoch} and {last} epoch {later}: "
            f"epochs {info.epoch} to {later - 1} are trained again, and {LAST_NAME} and their "
            "metrics rows are replaced",
            file=sys.stderr,
        )


def _plain(value: Any) -> Any:
    """``value`` with tuples as lists (a checkpoint's hyper-parameters come back either way)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _epoch_of(path: Path) -> int | None:
    try:
        return read_checkpoint_info(path).epoch
    except CheckpointError:
        return None  # a damaged last.ckpt: the resume from the other file is what is left
