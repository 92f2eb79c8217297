"""Instance maps on the stride-4 grid: a cell is a ring's when its centre is inside (assumptions
D14), so a mask neither grows nor shrinks with the grid, the way the authors' full-resolution
fill reduced 4x keeps it; the smaller of two overlapping instances stays on top."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lucid_train.data.masks import instance_map


def _circle(cx: float, cy: float, r: float, n: int = 64) -> np.ndarray:
    a = np.arange(n) * 2 * math.pi / n
    return np.stack([cx + r * np.cos(a), cy + r * np.sin(a)], -1).astype(np.float32)


def test_an_axis_aligned_box_covers_exactly_its_cells() -> None:
    box = np.array([[8, 8], [24, 8], [24, 24], [8, 24]], np.float32)  # canvas pixels
    cells = instance_map([box], 40, 40) > 0
    expected = np.zeros((10, 10), bool)
    expected[2:6, 2:6] = True  # [8, 24) px = cells 2..5 at stride 4
    assert np.array_equal(cells, expected)


@pytest.mark.parametrize("radius", [6.0, 8.0, 12.0, 20.0, 40.0])
def test_small_and_large_circles_keep_their_area_on_the_grid(radius: float) -> None:
    cells = instance_map([_circle(101.3, 90.7, radius)], 200, 200) > 0
    true_cells = math.pi * radius**2 / 16
    # within a fraction of the boundary's cells, never a whole ring of cells more (the old
    # half-a-cell growth added about perimeter/4 cells: 50 % at radius 6)
    assert abs(int(cells.sum()) - true_cells) <= 0.25 * (2 * math.pi * radius / 4) + 1
    ys, xs = np.nonzero(cells)
    centre = np.array([xs.mean() + 0.5, ys.mean() + 0.5]) * 4
    assert np.allclose(centre, [101.3, 90.7], atol=1.0)  # no drift to a side


def test_the_smaller_of_two_overlapping_instances_stays_on_top() -> None:
    big, small = _circle(50, 50, 30), _circle(60, 50, 8)
    m = instance_map([small, big], 100, 100)
    assert m[50 // 4, 60 // 4] == 1 and m[50 // 4, 36 // 4] == 2
    assert (m == 1).sum() > 0.8 * math.pi * 64 / 16


def test_polygons_with_many_vertices_and_off_canvas_parts() -> None:
    ring = _circle(0, 0, 60, n=2000)  # a quarter on the canvas, a long edge list
    m = instance_map([ring], 64, 64) > 0
    assert abs(int(m.sum()) - math.pi * 3600 / 4 / 16) < 12
    assert not instance_map([ring + 500], 64, 64).any()
