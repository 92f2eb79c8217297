"""Reading a run's checkpoint: its task and model, and the module it rebuilds.

A checkpoint's ``hyper_parameters`` hold everything needed to rebuild the module (task, model
name, classes, keypoints; `lucid_train.module.YOLOModule`). Asking for another task than the one
a checkpoint was trained for is refused before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lucid_train.data.records import Task
from lucid_train.model_spec import SUFFIXES

__all__ = [
    "CheckpointInfo",
    "CheckpointTaskError",
    "NotALucidCheckpointError",
    "load_module",
    "read_checkpoint_info",
]


class CheckpointTaskError(ValueError):
    """A checkpoint of one task was asked to serve another."""


class NotALucidCheckpointError(ValueError):
    """A file loads as a checkpoint but was not written by ``lucid fit`` (no task or model)."""


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint says about itself.

    Attributes:
        path: the file.
        task: the task it was trained for.
        model: its model name (``yolo26n-seg``...).
        hyper_parameters: the module's stored arguments.
    """

    path: Path
    task: Task
    model: str
    hyper_parameters: dict[str, Any]


def read_checkpoint_info(path: str | Path) -> CheckpointInfo:
    """Read the hyper-parameters of a lucid checkpoint (on the CPU).

    Raises:
        FileNotFoundError: no such file.
        NotALucidCheckpointError: the file is not a lucid checkpoint (no task/model in its
            hyper-parameters).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint {p}: no such file")
    ckpt = torch.load(p, map_location="cpu", weights_only=False)
    hp = dict(ckpt.get("hyper_parameters") or {})
    if "task" not in hp or "model" not in hp:
        raise NotALucidCheckpointError(
            f"checkpoint {p}: not a lucid checkpoint (no task/model in its hyper_parameters); "
            "pass a last.ckpt or best.ckpt written by `lucid fit`"
        )
    return CheckpointInfo(p, hp["task"], hp["model"], hp)


def check_task(info: CheckpointInfo, requested: Task | None, requested_model: str | None) -> None:
    """Refuse a checkpoint whose task is not the requested one, naming the file, its task and the
    fix.

    Raises:
        CheckpointTaskError: the tasks differ.
    """
    if requested is None or requested == info.task:
        return
    raise CheckpointTaskError(
        f"checkpoint {info.path} was trained for {info.task} (model {info.model}), but "
        f"{requested_model or requested} is a {requested} model; drop --model to use the "
        f"checkpoint's own ({info.model}), or pass a {requested} checkpoint "
        f"(a model name ending in {SUFFIXES[requested] or 'no suffix'!r})"
    )


def load_module(
    path: str | Path,
    *,
    task: Task | None = None,
    model: str | None = None,
    map_location: str | torch.device = "cpu",
) -> Any:
    """Rebuild the task's module from a checkpoint, with its trained weights: the EMA average
    (what validation scored and ``best.ckpt`` was chosen by) when the run kept one.

    Args:
        path: the checkpoint.
        task: the task the caller expects; None accepts the checkpoint's.
        model: the model name the caller gave (for the message only).

    Raises:
        CheckpointTaskError: the checkpoint's task is not ``task``.
    """
    from lucid_train.module import module_class
    from lucid_train.optim import ema_state_dict

    info = read_checkpoint_info(path)
    check_task(info, task, model)
    ckpt = torch.load(info.path, map_location=map_location, weights_only=False)
    module = module_class(info.task)(**info.hyper_parameters)
    module.load_state_dict(ema_state_dict(ckpt) or ckpt["state_dict"])
    return module.to(map_location).eval()
