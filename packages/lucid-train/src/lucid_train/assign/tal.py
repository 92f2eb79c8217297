"""Task-aligned assignment (TAL) with the small-target rule (STAL) and its one-to-one variant.

For every image, ground truth ``m`` and anchor ``a`` (dense ``(B, M, A)`` tensors throughout):

1. **Candidacy**: the anchor centre lies inside the ground truth (STAL-widened for small boxes,
   see :mod:`lucid_train.assign.candidates`) and the row is not padding.
2. **Alignment** ``t = s^alpha * u^beta``: ``s`` the predicted probability of the ground truth's
   class, ``u`` the overlap of the predicted box with the ground truth (CIoU clamped at 0 by
   default); 0 outside candidates.
3. **Top-k** anchors per ground truth by ``t`` over every anchor (0 off the candidates), then
   the candidates among them, as the authors': a candidate aligned at 0 ties with the
   non-candidates and stays only where ``topk``'s order keeps it (assumptions.md T5).
4. **Conflicts**: an anchor claimed by several ground truths goes to the candidate ground truth
   it overlaps most, ties to the lowest row (assumptions.md T4).
5. **One-to-one** (``topk2``): each ground truth then keeps only its ``topk2`` best positives by
   ``t``; a ground truth whose best anchor went to another keeps its next one.
6. **Soft targets**: positive ``(m, a)`` gets ``t * u_max(m) / (t_max(m) + 1e-9)``, so each
   ground truth's best anchor scores about its best overlap; the authors' absolute epsilon,
   which matters at init where ``t_max`` is 1e-7 to 1e-4 (assumptions.md T6).

Defaults are the authors' YOLO26 ones: ``alpha = 0.5``, ``beta = 6``, STAL at 16 px; the
one-to-many branch uses ``topk = 10``, the one-to-one branch ``topk = 7, topk2 = 1``
(assumptions.md T1-T3).

Capture contract: runs under ``no_grad`` with static shapes only - no ``.item()``, no
``nonzero``, no boolean-mask indexing, no Python branch on a tensor value - so it can be
recorded in a CUDA graph; every reduction over ``M`` is a max, which makes the result independent
of how many padding rows the targets carry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lucid_train.assign.candidates import candidates_in_boxes
from lucid_train.assign.overlaps import pairwise_ciou

if TYPE_CHECKING:
    from lucid_train.assign.padded_targets import PaddedTargets

__all__ = ["SOFT_TARGET_EPS", "Assignment", "CandidateFn", "OverlapFn", "TaskAlignedAssigner"]

SOFT_TARGET_EPS = 1e-9
"""Added to each ground truth's best alignment before the soft targets divide by it (T6)."""

OverlapFn = Callable[[Tensor, Tensor], Tensor]
"""``(gt (B, M, D), pred (B, A, D)) -> (B, M, A)`` pairwise overlap; D = 4 (xyxy) or 5 (rotated)."""

CandidateFn = Callable[[Tensor, Tensor], Tensor]
"""``(anchors_px (A, 2), gt (B, M, D)) -> (B, M, A)`` bool candidacy (padding not masked)."""


@dataclass
class Assignment:
    """Which ground truth each anchor learns from, and its soft targets. Background anchors hold
    zeros everywhere (and ``target_index`` 0, a safe gather index).

    Attributes:
        fg: ``(B, A)`` bool, the positive anchors.
        target_index: ``(B, A)`` int64 row into ``M`` of the assigned ground truth (0 on
            background); task extras gather their targets with it.
        target_boxes: ``(B, A, D)`` the assigned ground truth's box as given to the assigner
            (xyxy pixels, or ``(cx, cy, w, h, angle)`` for rotated assignment); 0 on background.
        target_labels: ``(B, A)`` int64 class of the assigned ground truth (0 on background).
        target_scores: ``(B, A, C)`` float32 soft class targets: the normalised alignment at
            the assigned class, 0 elsewhere and on background.
        overlaps: ``(B, A)`` float32 overlap (the assigner's measure, CIoU clamped at 0 by
            default, assumptions.md T2) of each positive's prediction with its ground truth;
            0 on background.
    """

    fg: Tensor
    target_index: Tensor
    target_boxes: Tensor
    target_labels: Tensor
    target_scores: Tensor
    overlaps: Tensor

    @property
    def weights(self) -> Tensor:
        """``(B, A)`` per-anchor loss weight: the soft target summed over classes (0 on bg)."""
        return self.target_scores.sum(-1)

    def gather(self, per_target: Tensor) -> Tensor:
        """Gather a ``(B, M, *rest)`` per-target tensor at each anchor: ``(B, A, *rest)``.

        Background rows hold row 0's values; mask them with :attr:`fg`.
        """
        idx = self.target_index.view(*self.target_index.shape, *([1] * (per_target.dim() - 2)))
        return per_target.gather(1, idx.expand(-1, -1, *per_target.shape[2:]))


def _first_argmax(values: Tensor) -> Tensor:
    """``(B, M, A) -> (B, A)`` int64 index of the maximum over ``M``, ties to the lowest index.

    Built from float ``amax`` reductions: deterministic on every device (``torch.max``'s indices
    are not) and, on CPU, several times faster than ``argmax`` over a middle dimension.
    """
    best = values.amax(1, keepdim=True)
    rows = torch.arange(values.shape[1], device=values.device, dtype=values.dtype).view(1, -1, 1)
    return (-torch.where(values == best, -rows, -float(values.shape[1])).amax(1)).long()


def _top_mask(rank: Tensor, k: int) -> Tensor:
    """``(B, M, A)`` bool, True at the ``k`` largest entries of each ``(b, m)`` row."""
    k = min(k, rank.shape[-1])
    index = rank.topk(k, dim=-1).indices
    return torch.zeros_like(rank, dtype=torch.bool).scatter_(-1, index, True)


class TaskAlignedAssigner:
    """Task-aligned assigner; see the module docstring for the algorithm.

    Args:
        num_classes: ``C``.
        topk: positives kept per ground truth by alignment (10 one-to-many, 7 one-to-one).
        alpha: exponent of the class probability in the alignment.
        beta: exponent of the overlap.
        small_target: STAL side in pixels (the authors' middle stride, 16); ``None``: plain TAL.
        topk2: after conflicts, keep each ground truth's ``topk2`` best positives (1 for the
            one-to-one branch); ``None`` or ``>= topk``: no second cut.
        overlap_fn: pairwise overlap ``(gt (B, M, D), pred (B, A, D)) -> (B, M, A)``; the result
            is clamped at 0. Defaults to CIoU on xyxy boxes.
        candidate_fn: ``(anchors_px (A, 2), gt (B, M, D)) -> (B, M, A)`` bool; defaults to
            :func:`~lucid_train.assign.candidates.candidates_in_boxes` with ``small_target``.
    """

    def __init__(
        self,
        num_classes: int,
        topk: int = 10,
        alpha: float = 0.5,
        beta: float = 6.0,
        small_target: float | None = 16.0,
        topk2: int | None = None,
        overlap_fn: OverlapFn = pairwise_ciou,
        candidate_fn: CandidateFn | None = None,
    ) -> None:
        if num_classes < 1 or topk < 1 or (topk2 is not None and topk2 < 1):
            raise ValueError(
                f"expected num_classes, topk and topk2 >= 1, got {num_classes}, {topk}, {topk2}"
            )
        self.num_classes = num_classes
        self.topk = topk
        self.topk2 = topk2
        self.alpha = alpha
        self.beta = beta
        self.small_target = small_target
        self.overlap_fn = overlap_fn
        self.candidate_fn = candidate_fn

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_classes={self.num_classes}, topk={self.topk}, "
            f"topk2={self.topk2}, alpha={self.alpha}, beta={self.beta}, "
            f"small_target={self.small_target})"
        )

    def candidates(self, anchors_px: Tensor, gt_boxes: Tensor) -> Tensor:
        """``(B, M, A)`` bool candidacy before the padding mask."""
        if self.candidate_fn is not None:
            return self.candidate_fn(anchors_px, gt_boxes)
        return candidates_in_boxes(anchors_px, gt_boxes, self.small_target)

    @torch.no_grad()
    def __call__(
        self,
        pred_scores: Tensor,
        pred_boxes: Tensor,
        anchors_px: Tensor,
        targets: PaddedTargets,
        gt_boxes: Tensor | None = None,
        *,
        overlaps: Tensor | None = None,
        candidates: Tensor | None = None,
    ) -> Assignment:
        """Assign anchors to ground truth.

        Args:
            pred_scores: ``(B, A, C)`` class probabilities (sigmoid applied), any float dtype.
            pred_boxes: ``(B, A, D)`` decoded predictions in pixels (xyxy, or rotated when
                ``overlap_fn`` is rotated).
            anchors_px: ``(A, 2)`` anchor centres in pixels.
            targets: padded ground truth; ``labels`` and ``mask`` are read, and ``boxes`` unless
                ``gt_boxes`` is given.
            gt_boxes: ``(B, M, D)`` boxes to assign against instead of ``targets.boxes`` (e.g.
                ``targets.rboxes`` with a rotated ``overlap_fn`` / ``candidate_fn``).
            overlaps: ``(B, M, A)`` precomputed pairwise overlap replacing ``overlap_fn`` (a task
                whose overlap needs more than boxes, e.g. keypoint OKS); clamped at 0.
            candidates: ``(B, M, A)`` bool precomputed candidacy replacing ``candidate_fn``.

        Returns:
            An :class:`Assignment` (float32 values, on the predictions' device).
        """
        gt = (targets.boxes if gt_boxes is None else gt_boxes).float()
        scores = pred_scores.float()
        labels, valid = targets.labels, targets.mask  # (B, M)
        num_gt = gt.shape[1]

        cand = self.candidates(anchors_px, gt) if candidates is None else candidates
        cand = cand & valid.unsqueeze(-1)  # (B, M, A)
        u = self.overlap_fn(gt, pred_boxes.float()) if overlaps is None else overlaps
        u = torch.where(cand, u.float().clamp(min=0), 0.0)
        # Probability of each ground truth's class at every anchor: (B, C, A) gathered by label.
        s = scores.transpose(1, 2).gather(1, labels.unsqueeze(-1).expand(-1, -1, scores.shape[1]))
        t = torch.where(cand, s.pow(self.alpha) * u.pow(self.beta), 0.0)  # (B, M, A)

        # Top-k per ground truth over every anchor, then candidates only: a zero-alignment
        # candidate ties with the non-candidates and is kept only where topk's order puts it
        # first, as the authors' (T5).
        pos = _top_mask(t, self.topk) & cand

        # Conflicts: an anchor claimed twice goes to its most-overlapping candidate (T4).
        claimed = pos.sum(1, keepdim=True) > 1  # (B, 1, A)
        winner = _first_argmax(torch.where(cand, u, -1.0))  # (B, A)
        rows = torch.arange(num_gt, device=gt.device).view(1, -1, 1)
        pos = torch.where(claimed, rows == winner.unsqueeze(1), pos)

        if self.topk2 is not None and self.topk2 < self.topk:
            pos = pos & _top_mask(torch.where(pos, t, -1.0), self.topk2)

        fg = pos.any(1)  # (B, A)
        target_index = torch.where(pos, rows, 0).amax(1)  # one row per anchor at most

        # Soft targets: t * u_max / (t_max + 1e-9) per ground truth, the authors' epsilon (T6).
        t_pos = torch.where(pos, t, 0.0)
        u_pos = torch.where(pos, u, 0.0)
        t_max = t_pos.amax(-1, keepdim=True) + SOFT_TARGET_EPS
        weight = (t_pos * u_pos.amax(-1, keepdim=True) / t_max).amax(1)  # (B, A)

        target_labels = torch.where(fg, labels.gather(1, target_index), 0)
        idx_boxes = target_index.unsqueeze(-1).expand(-1, -1, gt.shape[-1])
        target_boxes = torch.where(fg.unsqueeze(-1), gt.gather(1, idx_boxes), 0.0)
        classes = torch.arange(self.num_classes, device=gt.device)
        one_hot = target_labels.unsqueeze(-1) == classes  # (B, A, C), no data-dependent one_hot
        target_scores = torch.where(one_hot & fg.unsqueeze(-1), weight.unsqueeze(-1), 0.0)
        assigned_u = u_pos.amax(1)  # (B, A): the positive's own pair (one row per anchor)
        return Assignment(
            fg=fg,
            target_index=target_index,
            target_boxes=target_boxes,
            target_labels=target_labels,
            target_scores=target_scores,
            overlaps=assigned_u,
        )
