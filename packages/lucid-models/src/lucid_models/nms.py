"""Greedy non-maximum suppression in plain torch (torchvision is not a dependency).

:func:`batched_nms` keeps, in descending score order, every box whose IoU with each higher-scored
kept box *of the same class* is at most the threshold. Ties in score keep the lower input index
first (a stable sort), on every device.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["batched_nms", "box_iou"]


def box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Pairwise IoU of ``(N, 4)`` and ``(M, 4)`` ``(x1, y1, x2, y2)`` boxes -> ``(N, M)``.

    Empty boxes (zero area) have IoU 0 with everything, including themselves.
    """
    area1 = (boxes1[:, 2] - boxes1[:, 0]).clamp(min=0) * (boxes1[:, 3] - boxes1[:, 1]).clamp(min=0)
    area2 = (boxes2[:, 2] - boxes2[:, 0]).clamp(min=0) * (boxes2[:, 3] - boxes2[:, 1]).clamp(min=0)
    top_left = torch.maximum(boxes1[:, None, :2], boxes2[None, :, :2])  # (N, M, 2)
    bottom_right = torch.minimum(boxes1[:, None, 2:], boxes2[None, :, 2:])  # (N, M, 2)
    inter = (bottom_right - top_left).clamp(min=0).prod(-1)  # (N, M)
    union = area1[:, None] + area2[None, :] - inter
    return torch.where(union > 0, inter / union.clamp(min=1e-12), torch.zeros_like(inter))


def batched_nms(
    boxes: Tensor,
    scores: Tensor,
    labels: Tensor,
    iou_threshold: float,
    max_keep: int | None = None,
) -> Tensor:
    """Class-wise greedy NMS.

    Args:
        boxes: ``(N, 4)`` ``(x1, y1, x2, y2)``.
        scores: ``(N,)``.
        labels: ``(N,)`` integer classes; boxes of different classes never suppress each other.
        iou_threshold: a box is dropped when its IoU with a kept box exceeds this.
        max_keep: stop after this many kept boxes (the result is then exactly the first
            ``max_keep`` of the unbounded result).

    Returns:
        ``(K,)`` int64 indices into the inputs, in descending score order.
    """
    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    order = scores.argsort(descending=True, stable=True)
    sorted_boxes = boxes[order].float()
    # Shift each class to its own region of the plane so one IoU pass is class-wise.
    span = sorted_boxes.max() - sorted_boxes.min() + 1
    sorted_boxes = sorted_boxes + (labels[order].to(sorted_boxes) * span)[:, None]
    alive = torch.ones(len(order), dtype=torch.bool, device=boxes.device)
    keep: list[Tensor] = []
    limit = len(order) if max_keep is None else max_keep
    # Each pass keeps the best live box and kills its overlaps: at most `limit` passes.
    while len(keep) < limit and bool(alive.any()):
        best = int(alive.to(torch.uint8).argmax())  # first live position = highest live score
        keep.append(order[best])
        overlap = box_iou(sorted_boxes[best : best + 1], sorted_boxes)[0]  # (N,)
        alive &= overlap <= iou_threshold
        alive[best] = False
    return torch.stack(keep)
