"""Rotated-box geometry for assignment and the oriented loss: ProbIoU, candidacy, distance encoding.

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

__all__ = [
    "encode_rotated",
    "probiou",
    "rotated_overlaps",
    "to_training_angle_range",
]

PROBIOU_EPS = 1e-7


def _compute_dtype(*tensors: Tensor) -> torch.dtype:
    dtype = torch.float32
    for t in tensors:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _covariance(rboxes: Tensor, floor: float) -> tuple[Tensor, Tensor, Tensor]:
    """Gaussian of a rotated box: ``(..., 5) -> (var_xx, var_yy, cov_xy)``, each ``(...)``.

    A uniform box of side ``w`` has variance ``w**2 / 12``; ``floor`` is added to both principal
    variances (the authors use 0.01 in stride units in the loss to bound gradients of sub-stride
    boxes, 0 in assignment).
    """
    a = rboxes[..., 2].square() / 12 + floor
    b = rboxes[..., 3].square() / 12 + floor
    cos, sin = rboxes[..., 4].cos(), rboxes[..., 4].sin()
    cos2, sin2 = cos.square(), sin.square()
    return a * cos2 + b * sin2, a * sin2 + b * cos2, (a - b) * cos * sin


def probiou(
    boxes1: Tensor, boxes2: Tensor, *, floor: float = 0.0, eps: float = PROBIOU_EPS
) -> Tensor:
    """ProbIoU in Hellinger form, ``1 - sqrt(1 - exp(-B) + eps)``, ``B`` the Bhattacharyya distance.

    The authors' arithmetic (assumptions.md T27).

    Each box is read as the Gaussian of a uniform rectangle; ``B`` is clamped to ``[eps, 100]``
    as the authors do, so identical boxes score ``1 - sqrt(2 eps) ~ 0.99955``, not exactly 1.
    Symmetric in its arguments, invariant to ``theta + pi`` and to ``theta`` for squares.

    Args:
        boxes1: ``(..., 5)`` rotated boxes, any unit shared with ``boxes2``.
        boxes2: ``(..., 5)``, broadcast against ``boxes1`` (pairwise: ``(B, M, 1, 5)`` against
            ``(B, 1, A, 5)``).
        floor: added to both principal variances (see :func:`_covariance`).
        eps: the authors' stabiliser in every denominator and in the clamp.

    Returns:
        ``(...)`` similarity in ``[0, 1)``, float32 (float64 if an input is float64).
    """
    dtype = _compute_dtype(boxes1, boxes2)
    with torch.autocast(device_type=boxes1.device.type, enabled=False):
        b1, b2 = boxes1.to(dtype), boxes2.to(dtype)
        a1, bb1, c1 = _covariance(b1, floor)
        a2, bb2, c2 = _covariance(b2, floor)
        dx = b1[..., 0] - b2[..., 0]
        dy = b1[..., 1] - b2[..., 1]
        a, b, c = a1 + a2, bb1 + bb2, c1 + c2
        det = a * b - c.square()
        t1 = 0.25 * (a * dy.square() + b * dx.square()) / (det + eps)
        t2 = -0.5 * c * dx * dy / (det + eps)
        det1 = (a1 * bb1 - c1.square()).clamp(min=0)
        det2 = (a2 * bb2 - c2.square()).clamp(min=0)
        t3 = 0.5 * (det / (4 * (det1 * det2).sqrt() + eps) + eps).log()
        bhattacharyya = (t1 + t2 + t3).clamp(eps, 100.0)
        hellinger = (1.0 - (-bhattacharyya).exp() + eps).sqrt()
        return 1.0 - hellinger


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
