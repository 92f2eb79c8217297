"""Files in the authors' checkpoint layout, written from lucid's own modules (no Ultralytics).

The layout is the one `tests/lucid-train/facts/ultralytics_weights_layout.json` records: a
``torch.save`` archive of ``{"model": <ultralytics.nn.tasks.DetectionModel>, "train_args":
{...}, "train_metrics": {... numpy scalars}, ...}`` whose model is a tree of module objects
(``_parameters``, ``_buffers``, ``_modules``) holding fp16 tensors under the authors' names.
The module objects are instances of stand-in classes that pickle under the authors' class names
(``ultralytics.nn.tasks.DetectionModel``, ``ultralytics.nn.modules.conv.Conv``): their modules
are registered in ``sys.modules`` only while the file is written, and where Ultralytics itself is
imported (the peer lane) its classes are put back afterwards.
"""

from __future__ import annotations

import collections
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lucid_train.weights.authors_names import authors_key

TASK_CLASS = {
    "detect": "DetectionModel",
    "segment": "SegmentationModel",
    "pose": "PoseModel",
    "obb": "OBBModel",
}
BUFFER_NAMES = ("running_mean", "running_var", "num_batches_tracked", "mask", "loc", "cov")


class _Node:
    """A module object as pickled: its ``__dict__`` is a module's."""

    def __init__(self) -> None:
        self.training = False
        self._parameters: dict[str, Any] = collections.OrderedDict()
        self._buffers: dict[str, Any] = collections.OrderedDict()
        self._non_persistent_buffers_set: set[str] = set()
        self._modules: dict[str, Any] = collections.OrderedDict()


@contextmanager
def _authors_classes(root_class: str) -> Iterator[dict[str, type]]:
    """Stand-in classes registered under the authors' module names while the block runs."""
    names = {
        "ultralytics.nn.tasks": root_class,
        "ultralytics.nn.modules.conv": "Conv",
    }
    made: dict[str, type] = {}
    added = []
    for mod_name in ("ultralytics", "ultralytics.nn", "ultralytics.nn.modules", *names):
        if mod_name not in sys.modules:
            sys.modules[mod_name] = types.ModuleType(mod_name)
            added.append(mod_name)
    # A real Ultralytics imported before keeps its classes: left replaced, pickling one of its
    # models later in the process fails ("not the same object as ...DetectionModel").
    missing = object()
    replaced = [(sys.modules[m], c, getattr(sys.modules[m], c, missing)) for m, c in names.items()]
    try:
        for mod_name, cls_name in names.items():
            cls = type(cls_name, (_Node,), {"__module__": mod_name, "__qualname__": cls_name})
            setattr(sys.modules[mod_name], cls_name, cls)
            made[cls_name] = cls
        yield made
    finally:
        for module, cls_name, before in replaced:
            if before is missing:
                delattr(module, cls_name)
            else:
                setattr(module, cls_name, before)
        for mod_name in added:
            del sys.modules[mod_name]


def authors_state_dict(
    module: torch.nn.Module, dtype: torch.dtype = torch.float16
) -> dict[str, Tensor]:
    """``module``'s network (and pose flow) under the authors' names, floats in ``dtype``."""
    out: dict[str, Tensor] = {}
    for key, value in module.state_dict().items():
        name = authors_key(key)
        if name is not None:
            out[name] = value.detach().to(dtype) if value.is_floating_point() else value.detach()
    if any(k.startswith("model.23.flow_model.") for k in out):  # their prior, ours is a constant
        out["model.23.flow_model.loc"] = torch.zeros(2, dtype=dtype)
        out["model.23.flow_model.cov"] = torch.eye(2, dtype=dtype)
    return out


def write_authors_checkpoint(
    path: Path,
    state: Mapping[str, Tensor],
    *,
    task: str,
    scale: str = "n",
    num_classes: int = 80,
    kpt_shape: tuple[int, int] | None = None,
    extra: Mapping[str, Any] | None = None,
    edit: Callable[[dict[str, Any]], None] | None = None,
) -> Path:
    """Write ``state`` (authors' names) as an authors' checkpoint at ``path``.

    Args:
        extra: more top-level entries (e.g. an object whose unpickling would run code).
        edit: called with the top-level dict before saving.
    """
    with _authors_classes(TASK_CLASS[task]) as classes:
        root = classes[TASK_CLASS[task]]()
        for key, value in state.items():
            *parents, leaf = key.split(".")
            node = root
            for part in parents:
                node = node._modules.setdefault(part, classes["Conv"]())
            if leaf in BUFFER_NAMES:
                node._buffers[leaf] = value.clone()
            else:
                node._parameters[leaf] = torch.nn.Parameter(value.clone(), requires_grad=False)
        yaml: dict[str, Any] = {"nc": num_classes, "scale": scale, "end2end": True}
        if kpt_shape is not None:
            yaml["kpt_shape"] = list(kpt_shape)
        suffix = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}[task]
        yaml["yaml_file"] = f"yolo26{scale}{suffix}.yaml"
        root.__dict__.update(
            yaml=yaml,
            names={i: f"class{i}" for i in range(num_classes)},
            task=task,
            stride=torch.tensor([8.0, 16.0, 32.0]),
            args={"task": task, "imgsz": 640},
        )
        top: dict[str, Any] = {
            "date": "2026-01-01T00:00:00",
            "version": "8.4.190",
            "license": "AGPL-3.0 License (https://ultralytics.com/license)",
            "docs": "https://docs.ultralytics.com",
            "epoch": -1,
            "best_fitness": None,
            "model": root,
            "ema": None,
            "updates": None,
            "optimizer": None,
            "train_args": {"task": task, "epochs": 100},
            "train_metrics": {"metrics/mAP50-95(B)": np.float64(0.4)},
            "train_results": None,
            "stopper": None,
            "scaler": None,
            **(extra or {}),
        }
        if edit is not None:
            edit(top)
        torch.save(top, path)
    return path
