"""Overlap measures between axis-aligned boxes: IoU and Complete IoU (CIoU).

Both functions broadcast: pass ``(B, M, 1, 4)`` against ``(B, 1, A, 4)`` for a pairwise
``(B, M, A)`` matrix, or two ``(B, A, 4)`` tensors for element-wise values. Boxes are
``(x1, y1, x2, y2)`` in any common unit (pixels here).

The CIoU follows the authors' form (assumptions.md T12): a small ``eps`` is added to the heights,
the union and the enclosing diagonal; the aspect term compares ``atan(w / h)`` of the two boxes
and its trade-off weight is treated as a constant (no gradient), as in the CIoU paper.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lucid_kernels import ciou_kernel, ciou_kernel_applies

__all__ = ["box_ciou", "box_iou", "pairwise_ciou"]

EPS = 1e-7


def box_iou(box1: Tensor, box2: Tensor, eps: float = EPS) -> Tensor:
    """Intersection over union of ``(..., 4)`` xyxy boxes, broadcast; returns ``(...)``."""
    b1x1, b1y1, b1x2, b1y2 = box1.unbind(-1)
    b2x1, b2y1, b2x2, b2y2 = box2.unbind(-1)
    inter = (b1x2.minimum(b2x2) - b1x1.maximum(b2x1)).clamp(min=0) * (
        b1y2.minimum(b2y2) - b1y1.maximum(b2y1)
    ).clamp(min=0)
    w1, h1 = b1x2 - b1x1, b1y2 - b1y1 + eps
    w2, h2 = b2x2 - b2x1, b2y2 - b2y1 + eps
    return inter / (w1 * h1 + w2 * h2 - inter + eps)


def box_ciou(box1: Tensor, box2: Tensor, eps: float = EPS) -> Tensor:
    """Complete IoU of ``(..., 4)`` xyxy boxes, broadcast; returns ``(...)`` in ``[-1.5, 1]``.

    ``CIoU = IoU - rho^2 / c^2 - a * v`` with ``rho`` the distance between the centres, ``c`` the
    diagonal of the smallest enclosing box, ``v = 4 / pi^2 * (atan(w2 / h2) - atan(w1 / h1))^2``
    and ``a = v / (1 - IoU + v)`` held constant for the gradient. Symmetric in its arguments.
    """
    b1x1, b1y1, b1x2, b1y2 = box1.unbind(-1)
    b2x1, b2y1, b2x2, b2y2 = box2.unbind(-1)
    w1, h1 = b1x2 - b1x1, b1y2 - b1y1 + eps
    w2, h2 = b2x2 - b2x1, b2y2 - b2y1 + eps
    inter = (b1x2.minimum(b2x2) - b1x1.maximum(b2x1)).clamp(min=0) * (
        b1y2.minimum(b2y2) - b1y1.maximum(b2y1)
    ).clamp(min=0)
    iou = inter / (w1 * h1 + w2 * h2 - inter + eps)
    cw = b1x2.maximum(b2x2) - b1x1.minimum(b2x1)  # enclosing box
    ch = b1y2.maximum(b2y2) - b1y1.minimum(b2y1)
    c2 = cw.pow(2) + ch.pow(2) + eps
    rho2 = ((b2x1 + b2x2 - b1x1 - b1x2).pow(2) + (b2y1 + b2y2 - b1y1 - b1y2).pow(2)) / 4
    v = (4 / math.pi**2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
    with torch.no_grad():
        a = v / (1 - iou + v + eps)
    return iou - (rho2 / c2 + v * a)


def pairwise_ciou(gt_boxes: Tensor, pred_boxes: Tensor) -> Tensor:
    """CIoU of every (ground truth, prediction) pair, clamped at 0: the assigner's overlap.

    Args:
        gt_boxes: ``(B, M, 4)`` xyxy.
        pred_boxes: ``(B, A, 4)`` xyxy.

    Returns:
        ``(B, M, A)`` in ``[0, 1]``.

    On CUDA, for float32 boxes that need no gradient, one Triton pass computes the same bits
    (`lucid_kernels.ciou_kernel`): the elementwise form writes and reads the matrix back some
    forty times.
    """
    if ciou_kernel_applies(gt_boxes, pred_boxes):
        return ciou_kernel(gt_boxes, pred_boxes, EPS)
    return box_ciou(gt_boxes.unsqueeze(2), pred_boxes.unsqueeze(1)).clamp(min=0)
