"""A lucid checkpoint without a fit: a fresh module's weights and hyper-parameters, as
`lucid_train.tasks.restore.load_module` reads them (for commands that only read a checkpoint)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def write_module_checkpoint(path: Path, model: str = "yolo26n", **hparams: Any) -> Any:
    """Build the module of ``model`` (3 classes unless ``num_classes`` is given), save it as a
    checkpoint at ``path`` and return the module."""
    from lucid_train.model_spec import parse_model
    from lucid_train.tasks.task_modules import module_class

    spec = parse_model(model)
    hparams.setdefault("num_classes", 3)
    if spec.task == "pose":
        hparams.setdefault("num_keypoints", 7)
    module = module_class(spec.task)(model, img_size=64, **hparams)
    torch.save(
        {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams), "epoch": 1},
        path,
    )
    return module
