"""Greedy non-maximum suppression in plain torch (torchvision is not a dependency).

:func:`batched_nms` keeps, in descending score order, every box whose IoU with each higher-scored
kept box *of the same class* is at most the threshold. Ties in score keep the lower input index
first (a stable sort), on every device.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["batched_nms", "box_iou"]

_BLOCK = 256  # boxes compared with each other at once (a block x block IoU matrix)


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
        iou_threshold: a box is dropped when its IoU with a kept box exceeds this (or is NaN).
        max_keep: stop after this many kept boxes (the result is then exactly the first
            ``max_keep`` of the unbounded result).

    Returns:
        ``(K,)`` int64 indices into the inputs, in descending score order.
    """
    limit = len(boxes) if max_keep is None else min(max_keep, len(boxes))
    if boxes.numel() == 0 or limit <= 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    order = scores.argsort(descending=True, stable=True)
    sorted_boxes = boxes[order].float()
    # Shift each class to its own region of the plane so one IoU pass is class-wise.
    span = sorted_boxes.max() - sorted_boxes.min() + 1
    sorted_boxes = sorted_boxes + (labels[order].to(sorted_boxes) * span)[:, None]
    # The greedy pass runs on the host over each block's clash matrix, fetched in one transfer:
    # a device loop would wait on the device twice per kept box (hundreds per image).
    kept: list[int] = []  # positions in score order
    for start in range(0, len(order), _BLOCK):
        block = sorted_boxes[start : start + _BLOCK]
        alive = torch.ones(len(block), dtype=torch.bool, device=block.device)
        if kept:
            earlier = sorted_boxes[torch.tensor(kept, device=block.device)]
            alive &= (box_iou(earlier, block) <= iou_threshold).all(0)
        clashes = (~(box_iou(block, block) <= iou_threshold)).cpu()
        live = alive.tolist()
        for i, is_live in enumerate(live):
            if not is_live:
                continue
            kept.append(start + i)
            if len(kept) == limit:
                break
            for j in clashes[i, i + 1 :].nonzero().flatten().tolist():
                live[i + 1 + j] = False
        if len(kept) == limit:
            break
    return order[torch.tensor(kept, dtype=torch.long, device=boxes.device)]
