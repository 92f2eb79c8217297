"""Which anchors may be assigned to which ground truth: candidacy, with the small-target rule.

An anchor is a candidate for a ground-truth box when its centre (in pixels) lies strictly inside
the box (assumptions.md T3). STAL, the small-target rule: a box side shorter than
``small_target`` pixels is widened to ``small_target`` about the box centre, for candidacy only
(alignment, overlaps and targets keep the real box), so tiny objects still reach anchors. The
authors use their middle stride, 16 px.

Every function here is pure tensor arithmetic of static shape: no host synchronisation.
"""

from __future__ import annotations

from torch import Tensor

__all__ = ["anchors_in_pixels", "candidates_in_boxes", "candidates_in_rotated_boxes"]

INSIDE_EPS = 1e-9


def anchors_in_pixels(anchor_points: Tensor, anchor_strides: Tensor) -> Tensor:
    """Anchor centres in pixels: ``(A, 2)`` grid units times ``(A, 1)`` strides -> ``(A, 2)``.

    ``lucid_models.make_anchors`` and ``ModelOutput`` give anchors in grid units of their level
    (cell + 0.5); the assigner works in pixels.
    """
    return anchor_points.float() * anchor_strides.float()


def _widen(sizes: Tensor, small_target: float | None) -> Tensor:
    """Sides below ``small_target`` replaced by it (STAL); unchanged when ``None``."""
    # clamp, not where(.., new_tensor(..)): no host-to-device copy, so it can be captured.
    return sizes if small_target is None else sizes.clamp(min=small_target)


def candidates_in_boxes(
    anchors_px: Tensor, gt_boxes: Tensor, small_target: float | None = 16.0
) -> Tensor:
    """Anchors whose centre lies strictly inside each (STAL-widened) axis-aligned box.

    Args:
        anchors_px: ``(A, 2)`` anchor centres ``(x, y)`` in pixels.
        gt_boxes: ``(B, M, 4)`` xyxy pixels.
        small_target: sides shorter than this (pixels) are widened to it about the centre;
            ``None`` turns STAL off (plain TAL candidacy).

    Returns:
        ``(B, M, A)`` bool. Padding rows are not masked here; the assigner masks them.
    """
    centre = (gt_boxes[..., :2] + gt_boxes[..., 2:]) / 2
    half = _widen(gt_boxes[..., 2:] - gt_boxes[..., :2], small_target) / 2
    lt = (centre - half).unsqueeze(2)  # (B, M, 1, 2)
    rb = (centre + half).unsqueeze(2)
    xy = anchors_px.float()  # (A, 2), broadcast against (B, M, 1, 2)
    inside = ((xy - lt) > INSIDE_EPS) & ((rb - xy) > INSIDE_EPS)  # (B, M, A, 2)
    return inside.all(-1)


def candidates_in_rotated_boxes(
    anchors_px: Tensor, gt_rboxes: Tensor, small_target: float | None = 16.0
) -> Tensor:
    """Anchors whose centre lies inside each (STAL-widened) rotated box, edges included.

    The anchor is expressed in the box's own frame (rotated by ``-angle`` about the centre) and
    compared with the half sides, which is the point-in-rectangle test the authors make with the
    box corners; their rotated test is edge-inclusive.

    Args:
        anchors_px: ``(A, 2)`` pixels.
        gt_rboxes: ``(B, M, 5)`` ``(cx, cy, w, h, angle)`` pixels and radians.
        small_target: ``w`` or ``h`` shorter than this is widened to it (STAL); ``None``: off.

    Returns:
        ``(B, M, A)`` bool.
    """
    centre = gt_rboxes[..., None, :2]  # (B, M, 1, 2)
    half = _widen(gt_rboxes[..., 2:4], small_target)[..., None, :] / 2  # (B, M, 1, 2)
    angle = gt_rboxes[..., 4:5]  # (B, M, 1)
    cos, sin = angle.cos(), angle.sin()
    d = anchors_px.float() - centre  # (B, M, A, 2)
    along = d[..., 0] * cos + d[..., 1] * sin  # (B, M, A): coordinate along the box's w axis
    across = -d[..., 0] * sin + d[..., 1] * cos
    return (along.abs() <= half[..., 0]) & (across.abs() <= half[..., 1])
