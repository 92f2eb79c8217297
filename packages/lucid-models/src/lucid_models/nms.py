"""Non-maximum suppression (torchvision's kernel where it is installed and faster, else torch).

:func:`batched_nms` keeps, in descending score order, every box whose IoU with each higher-scored
kept box *of the same class* is at most the threshold. :func:`rotated_fast_nms` is the authors'
NMS of rotated boxes: Fast-NMS by ProbIoU, where a box is dropped when any higher-scored box of
its class overlaps it, kept or not. Ties in score keep the lower input index first (a stable
sort), on every device.

Two passes compute `batched_nms`, both greedy over the same class-shifted boxes in the same
order, and keep the same boxes (`benchmarks/nms_speed.py`; `tests/lucid-models/test_nms.py`):
torchvision's ``nms`` kernel, given each box's rank for its score so that its own sort keeps
our stable order, and a pass of our own over block clash matrices that stops at ``max_keep``.
Torchvision's cost grows with the candidates (it suppresses over all of them), ours is flat, so
the kernel takes up to `KERNEL_MAX` candidates (a trained model's few above the score floor)
and ours an untrained model's flood (docs/benchmarks/nms-speed.md). lucid-models depends on
torch alone: without torchvision, ours takes every call.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import torch
from torch import Tensor

from lucid_models.probiou import probiou

__all__ = ["KERNEL_MAX", "batched_nms", "box_iou", "rotated_fast_nms", "spanned_nms"]

_BLOCK = 256  # boxes compared with each other at once (a block x block IoU matrix)
# Candidates up to which torchvision's kernel is the faster pass, by device type (H200 and the
# 2-core CPU machine, docs/benchmarks/nms-speed.md).
KERNEL_MAX = {"cuda": 8_400, "cpu": 1_000}


@cache
def _kernel() -> Callable[[Tensor, Tensor, float], Tensor] | None:
    try:
        from torchvision.ops import nms
    except ImportError:  # torchvision is not a dependency of lucid-models
        return None
    return nms  # type: ignore[no-any-return]


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
    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    coords = boxes.float()
    span = coords.max() - coords.min() + 1
    return spanned_nms(
        coords, scores, labels, span, bool(torch.isfinite(span)), iou_threshold, max_keep
    )


def spanned_nms(
    boxes: Tensor,
    scores: Tensor,
    labels: Tensor,
    span: Tensor,
    finite: bool,
    iou_threshold: float,
    max_keep: int | None = None,
) -> Tensor:
    """`batched_nms` of float32 ``boxes`` given their ``span`` (``max - min + 1`` over every
    coordinate, a 0-d tensor) and whether it is finite: a caller with many sets of boxes reads
    their spans from the device once, not once a set."""
    limit = len(boxes) if max_keep is None else min(max_keep, len(boxes))
    if boxes.numel() == 0 or limit <= 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    order = scores.argsort(descending=True, stable=True)
    # Shift each class to its own region of the plane so one IoU pass is class-wise.
    sorted_boxes = boxes[order] + (labels[order].to(boxes) * span)[:, None]
    kernel = _kernel()
    if (
        kernel is not None
        and len(order) <= KERNEL_MAX.get(boxes.device.type, 0)
        # Where the kernel's IoU decides as ours: finite boxes, a threshold >= 0. An inverted or
        # empty box overlaps nothing in either (its clamped intersection is 0; the kernel's
        # unclamped areas make its IoU 0, -0 or NaN, none above the threshold), so it neither
        # suppresses nor is suppressed; an untrained head's raw distances give many of them.
        and iou_threshold >= 0
        and finite
    ):
        # ranks as scores: distinct, so the kernel's own (unstable) sort keeps our order
        rank = torch.arange(len(order), 0, -1, dtype=torch.float32, device=boxes.device)
        return order[kernel(sorted_boxes, rank, float(iou_threshold))[:limit]]
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


def rotated_fast_nms(
    rboxes: Tensor,
    scores: Tensor,
    labels: Tensor,
    iou_threshold: float,
    max_keep: int | None = None,
) -> Tensor:
    """Class-wise Fast-NMS of rotated boxes by ProbIoU, as the authors' validation runs it.

    In descending score order, a box is dropped when its ProbIoU with *any* higher-scored box of
    its class exceeds the threshold, whether or not that box was kept (Fast-NMS: one pass over
    the pairs, no greedy chain). This is the NMS of Ultralytics 8.4 for obb (assumptions M10);
    greedy NMS by polygon IoU would keep more. The pairs are compared a block of rows at a time.

    Args:
        rboxes: ``(N, 5)`` ``(cx, cy, w, h, theta)``.
        scores: ``(N,)``.
        labels: ``(N,)`` integer classes; boxes of different classes never suppress each other.
        iou_threshold: ProbIoU above which the lower-scored box of a pair is dropped.
        max_keep: keep at most this many (the first of the unbounded result).

    Returns:
        ``(K,)`` int64 indices into the inputs, in descending score order.
    """
    if rboxes.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=rboxes.device)
    order = scores.argsort(descending=True, stable=True)
    boxes, classes = rboxes[order].float(), labels[order]
    n = len(order)
    position = torch.arange(n, device=boxes.device)
    dropped = torch.zeros(n, dtype=torch.bool, device=boxes.device)
    for start in range(0, n, _BLOCK):
        rows = slice(start, start + _BLOCK)
        over = probiou(boxes[rows, None, :], boxes[None, :, :]) > iou_threshold  # (b, N)
        over &= classes[rows, None] == classes[None, :]
        over &= position[rows, None] < position[None, :]  # a higher-scored box on each row
        dropped |= over.any(0)
    kept = order[~dropped]
    return kept if max_keep is None else kept[:max_keep]
