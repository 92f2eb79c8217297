"""Rotated-box geometry for assignment and the oriented loss: ProbIoU and the distance encoding.

Rotated boxes are ``(cx, cy, w, h, theta)``. The data hand them over long-edge with ``theta`` in
``[-pi/2, pi/2)`` (assumptions.md D3); the authors train on ``[-pi/4, 3pi/4)``.
:func:`to_training_angle_range` maps the first onto the second (the same rectangle: ``theta + pi``
where ``theta < -pi/4``). ProbIoU and the angle loss do not see the difference, but the rotated
distances of :func:`encode_rotated` do (a half-turn swaps left/right and top/bottom), so targets
are converted before encoding (assumptions.md T24).

Candidacy for rotated boxes lives with the other candidacy tests
(:func:`lucid_train.assign.candidates_in_rotated_boxes`); pass it with :func:`rotated_overlaps` to
the assigner.

Everything here is fixed-shape and free of host synchronisation; results are float32 (float64
stays float64) whatever the autocast state.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lucid_models.probiou import PROBIOU_EPS, probiou

__all__ = [
    "PROBIOU_EPS",
    "encode_rotated",
    "probiou",
    "rotated_overlaps",
    "to_training_angle_range",
]


def rotated_overlaps(gt_rboxes: Tensor, pred_rboxes: Tensor) -> Tensor:
    """Pairwise ProbIoU for task-aligned assignment, clamped at 0: ``(B, M, A)``.

    Args:
        gt_rboxes: ``(B, M, 5)`` ground truth in pixels.
        pred_rboxes: ``(B, A, 5)`` decoded predictions in pixels (detached by the caller).
    """
    return probiou(gt_rboxes[:, :, None, :], pred_rboxes[:, None, :, :]).clamp(min=0)


def encode_rotated(rboxes: Tensor, anchor_points: Tensor) -> Tensor:
    """Rotated box -> ``(l, t, r, b)`` distances along its own axes; inverse of the model's decode.

    ``lucid_models.decode_rotated`` places the centre at ``anchor + R(theta)((r - l) / 2,
    (b - t) / 2)`` with size ``(l + r, t + b)`` (assumptions.md M13); this is its inverse.

    Args:
        rboxes: ``(..., A, 5)`` in the same unit as ``anchor_points`` (grid units in the loss).
        anchor_points: ``(A, 2)``.

    Returns:
        ``(..., A, 4)``; negative entries mean the anchor lies outside the box on that side.
    """
    ox = rboxes[..., 0] - anchor_points[:, 0]
    oy = rboxes[..., 1] - anchor_points[:, 1]
    cos, sin = rboxes[..., 4].cos(), rboxes[..., 4].sin()
    along_w = ox * cos + oy * sin
    along_h = -ox * sin + oy * cos
    half_w, half_h = rboxes[..., 2] / 2, rboxes[..., 3] / 2
    return torch.stack(
        (half_w - along_w, half_h - along_h, half_w + along_w, half_h + along_h), dim=-1
    )


def to_training_angle_range(rboxes: Tensor) -> Tensor:
    """Long-edge boxes with ``theta`` in ``[-pi/2, pi/2)`` -> ``theta`` in ``[-pi/4, 3pi/4)``.

    A half-turn leaves the rectangle unchanged, so only ``theta`` moves (assumptions.md T24).

    Args:
        rboxes: ``(..., 5)``.

    Returns:
        ``(..., 5)``, a new tensor.
    """
    theta = rboxes[..., 4]
    theta = torch.where(theta < -math.pi / 4, theta + math.pi, theta)
    return torch.cat((rboxes[..., :4], theta[..., None]), dim=-1)
