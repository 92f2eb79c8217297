"""Candidacy: strict interior for axis-aligned boxes, edge-inclusive rotated boxes, STAL widening,
and anchors in pixels."""

from __future__ import annotations

import math

import torch

from lucid_models import make_anchors
from lucid_train.assign import (
    anchors_in_pixels,
    candidates_in_boxes,
    candidates_in_rotated_boxes,
)


def test_anchors_in_pixels_are_cell_centres_times_stride() -> None:
    points, strides = make_anchors([(2, 2), (1, 1)], (8, 16))
    px = anchors_in_pixels(points, strides)
    expected = [[4.0, 4.0], [12.0, 4.0], [4.0, 12.0], [12.0, 12.0], [8.0, 8.0]]
    assert torch.equal(px, torch.tensor(expected))


def test_axis_aligned_candidacy_is_strictly_inside() -> None:
    anchors = torch.tensor([[4.0, 4.0], [12.0, 4.0], [20.0, 4.0], [12.0, 12.0]])
    boxes = torch.tensor([[[4.0, 0.0, 20.0, 30.0]]])  # anchors at x = 4 and 20 lie on the edges
    got = candidates_in_boxes(anchors, boxes, small_target=None)
    assert got.tolist() == [[[False, True, False, True]]]


def test_small_target_widens_each_short_side_about_the_centre() -> None:
    anchors = torch.tensor([[9.0, 20.0], [23.0, 20.0], [16.0, 11.0], [16.0, 5.0]])
    # 6 wide, 20 tall: x widened to (8, 24), y stays (10, 30).
    boxes = torch.tensor([[[13.0, 10.0, 19.0, 30.0]]])
    assert candidates_in_boxes(anchors, boxes, small_target=16.0).tolist() == [
        [[True, True, True, False]]
    ]
    assert candidates_in_boxes(anchors, boxes, small_target=None).tolist() == [
        [[False, False, True, False]]
    ]


def test_rotated_candidacy_follows_the_box_axes_edges_included() -> None:
    # A 40 x 10 box at 45 degrees about (50, 50): its long axis runs along x = y.
    rbox = torch.tensor([[[50.0, 50.0, 40.0, 10.0, math.pi / 4]]])
    d = 15.0 / math.sqrt(2.0)
    anchors = torch.tensor(
        [
            [50.0 + d, 50.0 + d],  # 15 px along the long axis: inside
            [50.0 + d, 50.0 - d],  # 15 px across it: outside (half height 5)
            [50.0 + 20.0 / math.sqrt(2.0), 50.0 + 20.0 / math.sqrt(2.0)],  # on the end edge
            [65.0, 50.0],  # inside the axis-aligned envelope, outside the box
        ]
    )
    got = candidates_in_rotated_boxes(anchors, rbox, small_target=None)[0, 0]
    assert got[:2].tolist() == [True, False]
    assert bool(got[2])  # edge-inclusive (the authors' rotated test)
    assert not bool(got[3])
    # STAL widens the 10 px side to 16: a point 7 px across the axis becomes a candidate.
    across = torch.tensor([[50.0 + 7.0 / math.sqrt(2.0), 50.0 - 7.0 / math.sqrt(2.0)]])
    assert not bool(candidates_in_rotated_boxes(across, rbox, small_target=None).item())
    assert bool(candidates_in_rotated_boxes(across, rbox, small_target=16.0).item())
