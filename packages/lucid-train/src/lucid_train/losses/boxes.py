"""Box regression terms of the detection loss: CIoU and L1 on the ``(l, t, r, b)`` distances.

Both are evaluated densely over every ``(B, A)`` anchor and selected by the assignment's
foreground with ``torch.where`` (no boolean gather, so shapes stay static for capture); background
anchors contribute exact zeros to the value and the gradient. Each positive is weighted by its
soft-target sum and the total divided by the branch's shared normaliser
``max(sum of soft targets, 1)`` - the authors' reduction (assumptions.md T7).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lucid_train.assign.overlaps import box_ciou

__all__ = ["boxes_to_distances", "ciou_loss", "distance_l1_loss", "distances_to_boxes"]


def distances_to_boxes(distances: Tensor, anchor_points: Tensor) -> Tensor:
    """``(..., A, 4)`` ``(l, t, r, b)`` around ``(A, 2)`` anchors -> xyxy in the same unit."""
    lt, rb = distances[..., :2], distances[..., 2:]
    return torch.cat((anchor_points - lt, anchor_points + rb), dim=-1)


def boxes_to_distances(boxes: Tensor, anchor_points: Tensor) -> Tensor:
    """xyxy ``(..., A, 4)`` -> ``(l, t, r, b)`` from ``(A, 2)`` anchors, same unit, unclamped."""
    return torch.cat((anchor_points - boxes[..., :2], boxes[..., 2:] - anchor_points), dim=-1)


def ciou_loss(
    pred_boxes: Tensor, target_boxes: Tensor, fg: Tensor, weight: Tensor, normaliser: Tensor
) -> Tensor:
    """``sum_fg (1 - CIoU(pred, target)) * weight / normaliser``.

    Args:
        pred_boxes: ``(B, A, 4)`` xyxy (any unit shared with the targets), with grad.
        target_boxes: ``(B, A, 4)`` xyxy.
        fg: ``(B, A)`` bool.
        weight: ``(B, A)`` per-anchor weight (0 on background).
        normaliser: 0-d, ``>= 1``.

    Returns:
        0-d float32.
    """
    keep = fg.unsqueeze(-1)
    # Background anchors see the unit box (0, 0, 1, 1), so CIoU's divisions stay finite where
    # its value is unused; built by a kernel, not copied from the host (capture-safe).
    unit = (torch.arange(4, device=pred_boxes.device) >= 2).float()
    pred = torch.where(keep, pred_boxes.float(), unit)
    target = torch.where(keep, target_boxes.float(), unit)
    loss = (1.0 - box_ciou(pred, target)) * weight
    return torch.where(fg, loss, 0.0).sum() / normaliser


def distance_l1_loss(
    pred_distances: Tensor,
    target_distances: Tensor,
    anchor_strides: Tensor,
    image_size: tuple[int, int] | Tensor,
    weight: Tensor,
    normaliser: Tensor,
) -> Tensor:
    """L1 between predicted and target ``(l, t, r, b)``, as fractions of the image side.

    The authors' DFL-free term (assumptions.md T7): distances in stride units are scaled to
    pixels, then divided by the image width (``l``, ``r``) or height (``t``, ``b``); the four
    absolute errors are averaged, weighted per anchor and divided by the normaliser.

    Args:
        pred_distances: ``(B, A, 4)`` stride units, with grad.
        target_distances: ``(B, A, 4)`` stride units (anything finite on background).
        anchor_strides: ``(A, 1)``.
        image_size: ``(H, W)`` of the input canvas, ints or a 2-element tensor.
        weight: ``(B, A)`` (0 on background, which zeroes those anchors).
        normaliser: 0-d.

    Returns:
        0-d float32.
    """
    height, width = image_size[0], image_size[1]  # ints, or 0-d tensors on the device
    error = ((pred_distances.float() - target_distances.float()) * anchor_strides.float()).abs()
    per_anchor = (error[..., 0::2].sum(-1) / width + error[..., 1::2].sum(-1) / height) / 4
    return (per_anchor * weight).sum() / normaliser
