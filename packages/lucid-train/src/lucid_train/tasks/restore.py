"""A module rebuilt from a file: a run's checkpoint (`load_module`), or an authors' checkpoint
converted once into a lucid weights file (`convert_weights`, ``python -m lucid_train.weights``).

Both build a task module, so they sit above `lucid_train.tasks.module`; reading the files
themselves (without running code from them) is `lucid_train.weights`'.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import torch

from lucid_train.atomic_files import atomic_path
from lucid_train.data.records import Task
from lucid_train.model_spec import parse_model
from lucid_train.optim import ema_state_dict
from lucid_train.tasks.task_modules import module_class
from lucid_train.weights import (
    LUCID_WEIGHTS_KEY,
    WeightsError,
    WeightsReport,
    load_weights,
    loadable_keys,
    read_authors_file,
)
from lucid_train.weights.authors_names import lucid_key
from lucid_train.weights.authors_pickle import is_authors_checkpoint
from lucid_train.weights.checkpoint_file import (
    CheckpointError,
    check_finite_weights,
    check_task,
    load_checkpoint_file,
    read_checkpoint_info,
)

__all__ = ["convert_weights", "load_module"]


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
    info = read_checkpoint_info(path)
    check_task(info, task, model)
    ckpt = load_checkpoint_file(info.path, map_location)
    state = ema_state_dict(ckpt) or ckpt["state_dict"]
    check_finite_weights(info.path, state)
    module = module_class(info.task)(**info.hyper_parameters)
    module.load_state_dict(state)
    return module.to(map_location).eval()


def convert_weights(src: str | Path, dst: str | Path) -> WeightsReport:
    """Write the authors' ``src`` as a lucid weights file ``dst`` (the module's tensors in our
    names, in the file's dtype, plus its model, classes and keypoints); returns the report of
    reading it.

    Raises:
        WeightsError: ``src`` is not an authors' checkpoint lucid can map.
    """
    s = Path(src)
    if s.is_dir():
        raise WeightsError(f"weights {s}: a folder; pass the authors' .pt file inside it")
    if not s.is_file():
        raise FileNotFoundError(f"weights {s}: no such file")
    if Path(dst).resolve() == s.resolve():
        raise WeightsError(
            f"weights {s}: the output is the file itself, which the conversion would replace; "
            "write the lucid weights to another path (yolo26n-lucid.pt)"
        )
    if s.stat().st_size == 0:
        raise WeightsError(f"weights {s}: an empty file (0 bytes); download or copy it again")
    if not is_authors_checkpoint(s):
        try:  # lucid's own files need no conversion: say so rather than "not theirs"
            lucid = read_checkpoint_info(s).model
        except (CheckpointError, OSError):
            lucid = None
        if lucid is not None:
            raise WeightsError(
                f"weights {s}: a lucid checkpoint of {lucid} already (nothing to convert); pass "
                "it to lucid fit --model.weights as it is"
            )
        if not zipfile.is_zipfile(s):  # theirs and ours are torch zip archives
            raise WeightsError(
                f"weights {s}: not a torch zip archive ({s.stat().st_size} bytes): a download "
                "or copy cut short, or not a checkpoint at all; download or copy it again"
            )
        raise WeightsError(f"weights {s}: not an Ultralytics checkpoint (nothing to convert)")
    ck = read_authors_file(s)
    if ck.model_name is None or ck.num_classes is None:
        raise WeightsError(f"weights {s}: its model names no scale/task or class count")
    spec = parse_model(ck.model_name)
    kpt = ck.kpt_shape[0] if ck.kpt_shape else None
    module = module_class(spec.task)(
        spec.name,
        num_classes=ck.num_classes,
        class_names=ck.class_names or (),
        num_keypoints=kpt if spec.task == "pose" else None,
    )
    report = load_weights(module, s)
    dtypes = {lucid_key(k, frozenset(report.loaded)): v.dtype for k, v in ck.state_dict.items()}
    state = {k: v.detach().to(dtypes.get(k) or v.dtype) for k, v in loadable_keys(module).items()}
    meta = {
        "format": 1,
        "model": spec.name,
        "task": spec.task,
        "num_classes": ck.num_classes,
        "class_names": list(module.hparams["class_names"]),
        "num_keypoints": kpt,
        "source": f"{s.name} (Ultralytics {ck.version})",
    }
    with atomic_path(dst) as tmp:
        torch.save({LUCID_WEIGHTS_KEY: meta, "state_dict": state}, tmp)
    return report
