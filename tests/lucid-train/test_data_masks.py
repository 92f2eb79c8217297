"""Instance maps on the stride-4 grid follow the authors' mask targets (assumptions D14): the
polygon filled at the canvas resolution (integer vertices, outline included) and reduced 4x
bilinearly. Held against the cells the authors' 8.4.190 build turns on for fixed polygons
(`facts/ultralytics_masks.json`, written by `facts/ultralytics_masks.py`); the smaller of two
overlapping instances stays on top."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from lucid_train.data.masks import instance_map

FACTS = json.loads((Path(__file__).parent / "facts" / "ultralytics_masks.json").read_text())


def _theirs(case: dict) -> np.ndarray:  # type: ignore[type-arg]
    side = case["size"] // 4
    out = np.zeros(side * side, np.int16)
    for j, cells in enumerate(case["cells"]):
        out[cells] = j + 1
    return out.reshape(side, side)


def _ours(case: dict) -> np.ndarray:  # type: ignore[type-arg]
    rings = [np.asarray(p, np.float32) for p in case["polygons"]]
    return instance_map(rings, case["size"], case["size"])


@pytest.mark.parametrize("case", [c for c in FACTS if not c["name"].startswith("random")],
                         ids=lambda c: c["name"])  # fmt: skip
def test_named_polygons_give_the_authors_cells(case: dict) -> None:  # type: ignore[type-arg]
    assert int((_ours(case) != _theirs(case)).sum()) <= 1


def test_random_polygons_differ_from_the_authors_in_under_one_percent_of_cells() -> None:
    cases = [c for c in FACTS if c["name"].startswith("random")]
    theirs_on = sum(int((_theirs(c) > 0).sum()) for c in cases)
    differ = [int((_ours(c) != _theirs(c)).sum()) for c in cases]
    assert theirs_on > 1000 and sum(differ) <= 0.01 * theirs_on and max(differ) <= 3


def test_an_axis_aligned_box_covers_exactly_its_cells() -> None:
    box = np.array([[8, 8], [24, 8], [24, 24], [8, 24]], np.float32)  # canvas pixels
    cells = instance_map([box], 40, 40) > 0
    expected = np.zeros((10, 10), bool)
    expected[2:6, 2:6] = True  # [8, 24] px = cells 2..5 at stride 4
    assert np.array_equal(cells, expected)


def test_the_smaller_of_two_overlapping_instances_stays_on_top() -> None:
    a = np.arange(32) * 2 * math.pi / 32
    big = np.stack([50 + 30 * np.cos(a), 50 + 30 * np.sin(a)], -1).astype(np.float32)
    small = np.stack([60 + 8 * np.cos(a), 50 + 8 * np.sin(a)], -1).astype(np.float32)
    m = instance_map([small, big], 100, 100)
    assert m[50 // 4, 60 // 4] == 1 and m[50 // 4, 36 // 4] == 2


def test_off_canvas_parts_and_stride_one() -> None:
    a = np.arange(400) * 2 * math.pi / 400
    ring = np.stack([60 * np.cos(a), 60 * np.sin(a)], -1).astype(np.float32)  # a quarter on it
    m = instance_map([ring], 64, 64) > 0
    assert abs(int(m.sum()) - math.pi * 3600 / 4 / 16) < 15
    assert not instance_map([ring + 500], 64, 64).any()
    px = instance_map([np.array([[2, 2], [5, 2], [5, 5], [2, 5]], np.float32)], 8, 8, stride=1)
    assert (px > 0).sum() == 16  # the integer points 2..5 of the fill, outline included
