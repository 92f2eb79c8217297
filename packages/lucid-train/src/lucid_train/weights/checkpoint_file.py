"""Reading a run's checkpoint: its task and model, and the module it rebuilds.

A checkpoint's ``hyper_parameters`` hold everything needed to rebuild the module (task, model
name, classes, keypoints; `lucid_train.tasks.restore.load_module` rebuilds it). Asking for another
task than the one a checkpoint was trained for is refused before anything is built.

Every read goes through `load_checkpoint_file`: ``torch.load(weights_only=True)``, which rebuilds
only tensors and plain values (dicts, lists, tuples, strings, numbers), the whole content of a
lucid checkpoint, hyper-parameters included (assumptions.md T67). A file that asks the unpickler
for anything else (a function to call, a class to build) is refused before any of it runs; a
truncated or corrupt file is named, with the last good checkpoint beside it. A checkpoint
whose weights hold NaN or infinite values (a run that diverged before lucid checked its
gradients) is refused where it would be used, not scored as zero.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lucid_train.data.records import Task
from lucid_train.errors import LucidError
from lucid_train.model_spec import SUFFIXES, a_task, parse_model

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointTaskError",
    "CorruptCheckpointError",
    "NotALucidCheckpointError",
    "check_finite_weights",
    "load_checkpoint_file",
    "missing_file",
    "read_checkpoint_info",
]


class CheckpointError(LucidError, ValueError):
    """A checkpoint that cannot be used: unsafe, truncated, corrupt or not lucid's. The message
    is one line naming the file and what to do."""


class CheckpointTaskError(CheckpointError):
    """A checkpoint of one task was asked to serve another."""


class CorruptCheckpointError(CheckpointError):
    """A file that is no readable checkpoint; ``finding`` says what was found, without the
    message's advice on resuming (the last good checkpoint beside it, or to start again)."""

    def __init__(self, message: str, finding: str) -> None:
        super().__init__(message)
        self.finding = finding


class NotALucidCheckpointError(CheckpointError):
    """A file loads as a checkpoint but was not written by ``lucid fit`` (no task or model)."""


def _first_line(err: BaseException) -> str:
    """What went wrong, in one line, without torch's advice to load with ``weights_only=False``
    (for a file that is not a checkpoint, that advice is the one thing not to do)."""
    text = str(err)
    if "WeightsUnpickler error:" in text:
        after = text.split("WeightsUnpickler error:", 1)[1].strip().splitlines()
        return f"not a readable pickle: {after[0].strip() if after else 'unknown'}"
    lines = [line for line in text.strip().splitlines() if "weights_only" not in line]
    return f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _last_good_checkpoint(bad: Path) -> str:
    """``"the last good checkpoint there is X (epoch N)"``: the newest other ``.ckpt`` in the
    folder that reads cleanly, or the advice to start again."""
    others = sorted(
        (p for p in bad.parent.glob("*.ckpt") if p.is_file() and p.resolve() != bad.resolve()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for other in others:
        try:
            ckpt = _torch_load(other, "cpu")
        except Exception:  # another bad file: look further
            continue
        epoch = ckpt.get("epoch") if isinstance(ckpt, dict) else None
        return f"the last good checkpoint there is {other} (epoch {epoch})"
    return "no other checkpoint in that folder reads; start the run again"


def missing_file(kind: str, path: Path) -> LucidError | FileNotFoundError:
    """The error for a ``kind`` (``checkpoint``, ``weights``) path that is not a file: a folder
    names the checkpoints it holds (a run folder's are in ``checkpoints/``)."""
    if not path.is_dir():
        return FileNotFoundError(f"{kind} {path}: no such file")
    held = sorted(path.glob("checkpoints/*.ckpt")) + sorted(path.glob("*.ckpt"))
    if held:
        names = ", ".join(str(h) for h in held[:3]) + (" ..." if len(held) > 3 else "")
        return CheckpointError(f"{kind} {path} is a folder; pass one of its files: {names}")
    return CheckpointError(
        f"{kind} {path} is a folder with no .ckpt in it; pass a file (a run's checkpoints are "
        "in runs/<task>/<name>/checkpoints/)"
    )


# Files whose name says they hold something else: told so, not that they are damaged.
_OTHER_SUFFIXES = (".yaml", ".yml", ".json", ".txt", ".csv", ".md", ".jpg", ".jpeg", ".png")


# torch.save's two formats: a zip archive, or (before torch 1.6) a pickle led by its magic number
_ZIP_MAGIC = b"PK\x03\x04"
_LEGACY_TORCH_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"


def _torch_load(path: Path, map_location: Any) -> Any:
    return torch.load(path, map_location=map_location, weights_only=True)


def _what_failed(path: Path, err: Exception) -> str:
    """Why the file did not load: what its first bytes are when no torch file begins so (the
    unpickler's own error, ``KeyError: 101``, says nothing to a user), else that error."""
    with path.open("rb") as f:
        head = f.read(12)
    if head and not head.startswith((_ZIP_MAGIC, b"\x80")):
        return f"it begins {head!r}, neither a zip archive nor a pickle as torch.save writes"
    return _first_line(err)


def _is_plain_pickle(path: Path) -> bool:
    """A pickle that torch.save did not write (no zip, no torch magic number)."""
    with path.open("rb") as f:
        head = f.read(len(_LEGACY_TORCH_MAGIC))
    return head[:1] == b"\x80" and not head.startswith((_ZIP_MAGIC, _LEGACY_TORCH_MAGIC))


def load_checkpoint_file(path: str | Path, map_location: Any = "cpu") -> Any:
    """``torch.load`` a checkpoint without running code from it (``weights_only=True``);
    ``map_location`` as `torch.load` takes it.

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: a folder (its checkpoints named); the file asks for objects beyond
            tensors and plain values (refused before any is built); it is named as another
            kind of file (``.yaml`` ...); or it is truncated or corrupt (with the last good
            checkpoint beside it, if any).
    """
    p = Path(path)
    if not p.is_file():
        raise missing_file("checkpoint", p)
    if _is_plain_pickle(p):
        finding = (
            "is a plain pickle, not a file torch.save wrote: refused unread (it could run code)"
        )
        raise CorruptCheckpointError(
            f"checkpoint {p} {finding}; pass the last.ckpt or best.ckpt that `lucid fit` wrote",
            finding,
        )
    try:
        return _torch_load(p, map_location)
    except Exception as err:
        text = str(err)
        found = sorted(set(re.findall(r"GLOBAL ([\w.]+)", text)))
        # A weights-only refusal names what the file asked for; "Unsupported operand" and
        # the like are bytes that are no pickle at all: damage, reported as such below.
        if "Weights only load failed" in text and (found or "reduce" in text):
            what = f" ({', '.join(found)})" if found else ""
            raise CheckpointError(
                f"checkpoint {p}: refused: it asks to build objects{what} beyond tensors and "
                "plain values, which could run code; lucid checkpoints hold none, so it was "
                "not written by `lucid fit` (or was altered); nothing from it was run"
            ) from None
        if p.suffix.lower() in _OTHER_SUFFIXES:
            finding = f"is not a checkpoint (a {p.suffix.lower()} file)"
            raise CorruptCheckpointError(
                f"checkpoint {p} {finding}; pass the last.ckpt or best.ckpt that `lucid fit` "
                "wrote (runs/<task>/<name>/checkpoints/)",
                finding,
            ) from None
        finding = f"is truncated or corrupt ({_what_failed(p, err)})"
        raise CorruptCheckpointError(
            f"checkpoint {p} {finding}; {_last_good_checkpoint(p)}", finding
        ) from None


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint says about itself.

    Attributes:
        path: the file.
        task: the task it was trained for.
        model: its model name (``yolo26n-seg``...).
        hyper_parameters: the module's stored arguments.
        epoch: Lightning's ``epoch``: the epochs completed when it was written (the epoch a
            resumed run starts at), None when absent.
        epochs_run: the epochs its fit loop counts as run (``processed``), which a resume
            compares with ``max_epochs``; ``epoch`` when the file has no loop state.
        global_step: the optimizer steps taken, which a resume compares with ``max_steps``.
    """

    path: Path
    task: Task
    model: str
    hyper_parameters: dict[str, Any]
    epoch: int | None = None
    epochs_run: int | None = None
    global_step: int | None = None


def read_checkpoint_info(path: str | Path) -> CheckpointInfo:
    """Read the hyper-parameters of a lucid checkpoint (on the CPU).

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: unsafe, truncated or corrupt (`load_checkpoint_file`).
        NotALucidCheckpointError: not a lucid checkpoint (no task/model in its hyper-parameters).
    """
    p = Path(path)
    ckpt = load_checkpoint_file(p)
    hp = dict(ckpt.get("hyper_parameters") or {}) if isinstance(ckpt, dict) else {}
    if "task" not in hp or "model" not in hp:
        raise NotALucidCheckpointError(
            f"checkpoint {p}: not a lucid checkpoint (no task/model in its hyper_parameters); "
            "pass a last.ckpt or best.ckpt written by `lucid fit`"
        )
    try:
        spec = parse_model(str(hp["model"]))
    except ValueError as err:
        raise NotALucidCheckpointError(
            f"checkpoint {p}: its hyper-parameter 'model' is {hp['model']!r:.60}, which is not a "
            f"lucid model ({err}); the file was altered or written by another program"
        ) from None
    if hp["task"] != spec.task:
        raise NotALucidCheckpointError(
            f"checkpoint {p}: its task {hp['task']!r:.40} is not its model {spec.name}'s "
            f"({spec.task}); the file was altered or written by another program"
        )
    epoch = _count(ckpt, "epoch")
    run = _count(ckpt, "loops", "fit_loop", "epoch_progress", "current", "processed")
    return CheckpointInfo(
        p, hp["task"], hp["model"], hp, epoch, epoch if run is None else run,
        _count(ckpt, "global_step"),
    )  # fmt: skip


def _count(doc: Any, *keys: str) -> int | None:
    """The whole number at ``doc[k1][k2]...``, None where the file has none."""
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return int(doc) if isinstance(doc, int) else None


def check_task(info: CheckpointInfo, requested: Task | None, requested_model: str | None) -> None:
    """Refuse a checkpoint whose task is not the requested one, or whose model is not the
    requested model name (scale and task), naming the file, its model and the fix.

    Raises:
        CheckpointTaskError: the tasks or the models differ.
    """
    if requested is not None and requested != info.task:
        ending = SUFFIXES[requested]
        suffix = f"a model name ending in {ending!r}" if ending else "a model name without a suffix"
        raise CheckpointTaskError(
            f"checkpoint {info.path} was trained for {info.task} (model {info.model}), but "
            f"{requested_model or requested} is {a_task(requested)} model; drop --model to use the "
            f"checkpoint's own ({info.model}), or pass {a_task(requested)} checkpoint ({suffix})"
        )
    if requested_model is not None and requested_model != info.model:
        raise CheckpointTaskError(
            f"checkpoint {info.path} holds {info.model}, but --model {requested_model} was "
            f"asked; drop --model to use the checkpoint's own, or pass a {requested_model} "
            "checkpoint"
        )


def check_finite_weights(path: Path, state: Mapping[str, Any], what: str = "weights") -> None:
    """Refuse ``state`` (a checkpoint's tensors by name) if any floating tensor holds NaN or
    infinity, naming the file, how many and the first, and what to use instead.

    Raises:
        CheckpointError: a non-finite tensor.
    """
    bad = [
        name
        for name, t in state.items()
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(t.isfinite().all())
    ]
    if bad:
        raise CheckpointError(
            f"checkpoint {path}: {len(bad)} of its {len(state)} {what} tensors hold NaN or "
            f"infinite values (first: {bad[0]}): the run had diverged when it was written; use "
            "an earlier checkpoint (best.ckpt) and lower the learning rate"
        )
