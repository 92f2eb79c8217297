"""Shared fixtures for the lucid-models tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from lucid_models import YOLO26, build_model
from lucid_models.outputs import Task


def _shape_only_model(name: str, task: Task, num_classes: int = 80) -> YOLO26:
    with torch.device("meta"):
        model = build_model(
            name,
            task=task,
            num_classes=num_classes,
            num_keypoints=17 if task == "pose" else None,
        )
    return model.to_empty(device="cpu")


@pytest.fixture
def shape_only_model() -> Callable[..., YOLO26]:
    """Builds models with uninitialised host storage (meta, then empty) for fake-tensor runs."""
    return _shape_only_model


@pytest.fixture
def seeded() -> None:
    """Fix torch's global RNG so initialisation is the same on every run."""
    torch.manual_seed(0)
