"""Shared fixtures of the lucid-train data and evaluation tests (small synthetic sets, images)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lucid_train.data.records import Task
from lucid_train.data.synthetic import SyntheticSpec, synthetic_dataset

SMALL = SyntheticSpec(num_train=12, num_val=6, min_side=128, max_side=192)


@pytest.fixture(scope="session")
def small_synthetic(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Task], Path]:
    """A tiny synthetic set per task (COCO layout), generated once per session."""
    cache = tmp_path_factory.mktemp("synthetic")

    def make(task: Task) -> Path:
        return synthetic_dataset(task, cache_dir=cache, spec=SMALL)

    return make


def _write_image(
    path: Path, width: int = 64, height: int = 48, colour: tuple[int, int, int] = (90, 90, 90)
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((height, width, 3), colour, np.uint8)).save(path)
    return path


@pytest.fixture
def write_image() -> Callable[..., Path]:
    """``write_image(path, width=64, height=48, colour=...)``: a plain RGB PNG."""
    return _write_image
