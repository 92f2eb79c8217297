"""Polygon clipping, areas and rotated-box fitting agree with hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lucid_train.data.polygons import (
    clip_polygon,
    clip_to_rect,
    convex_iou,
    polygon_area,
    signed_area,
)
from lucid_train.data.rotated import canonical_rboxes, fit_rboxes, rbox_corners, rbox_envelopes


def test_polygon_area_and_winding() -> None:
    """Shoelace area of a 4x3 rectangle is 12 in either winding; the sign tells the winding."""
    ring = np.array([[0, 0], [4, 0], [4, 3], [0, 3]])
    assert polygon_area(ring) == 12
    assert polygon_area(ring[::-1]) == 12
    assert signed_area(ring) == -signed_area(ring[::-1])


def test_clip_of_overlapping_squares_is_their_intersection() -> None:
    """Two unit-offset 2x2 squares intersect in a 1x1 square: IoU 1/7."""
    a = np.array([[0, 0], [2, 0], [2, 2], [0, 2]], np.float64)
    b = a + 1
    assert polygon_area(clip_polygon(a, b)) == pytest.approx(1.0)
    assert convex_iou(a, b) == pytest.approx(1 / 7)
    assert convex_iou(a, a[::-1]) == pytest.approx(1.0)
    assert clip_polygon(a, a + 5).shape == (0, 2)


def test_clip_to_rect_cuts_a_triangle_to_the_canvas() -> None:
    """A right triangle half outside the canvas keeps exactly the inside area."""
    tri = np.array([[-2, 0], [2, 0], [2, 4]], np.float64)  # area 8, inside x >= 0: trapezoid
    kept = clip_to_rect(tri, 10, 10)
    assert polygon_area(kept) == pytest.approx(8 - 0.5 * 2 * 2)


def test_fit_rboxes_recovers_a_rotated_rectangle_in_long_edge_form() -> None:
    """Corners of a known box fit back to it (any corner order), long side first."""
    rb = np.array([[50, 40, 30, 10, 0.3], [10, 10, 4, 8, 1.2]], np.float32)
    corners = rbox_corners(rb)
    fit = fit_rboxes(corners[:, [2, 3, 0, 1]])
    want = canonical_rboxes(rb)
    np.testing.assert_allclose(fit, want, atol=1e-4)
    assert (fit[:, 2] >= fit[:, 3]).all()
    assert ((fit[:, 4] >= -math.pi / 2) & (fit[:, 4] < math.pi / 2)).all()


def test_canonical_rboxes_swaps_sides_and_wraps_the_angle() -> None:
    """(w < h, theta) becomes (h, w, theta + pi/2) wrapped into [-pi/2, pi/2)."""
    out = canonical_rboxes(np.array([[0, 0, 2, 6, 0.25]]))
    np.testing.assert_allclose(out, [[0, 0, 6, 2, 0.25 + math.pi / 2 - math.pi]], atol=1e-6)


def test_rbox_envelope_of_an_axis_aligned_box_is_the_box() -> None:
    """theta = 0: the envelope is the box itself."""
    np.testing.assert_allclose(rbox_envelopes(np.array([[5, 5, 4, 2, 0]])), [[3, 4, 7, 6]])
