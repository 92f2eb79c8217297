"""A detection-style loss written for targets padded to a capacity (torch only)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def pad(
    pieces: Sequence[torch.Tensor], rows: int, fill: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack per-image ``(n_i, *trailing)`` pieces into ``(B, rows, *trailing)`` and a mask."""
    trailing = pieces[0].shape[1:]
    out = pieces[0].new_full((len(pieces), rows, *trailing), fill)
    mask = torch.zeros(len(pieces), rows, dtype=torch.bool, device=pieces[0].device)
    for i, piece in enumerate(pieces):
        out[i, : len(piece)] = piece
        mask[i, : len(piece)] = True
    return out, mask


def padded_detection_loss(
    pred_boxes: torch.Tensor,
    pred_logits: torch.Tensor,
    gt_boxes: torch.Tensor,
    gt_labels: torch.Tensor,
    gt_mask: torch.Tensor,
    box_weight: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, A, 4), (B, A, C), (B, K, 4), (B, K), (B, K), () -> (loss, detached parts (2,))``.

    Each anchor is matched to its cheapest valid target by L1 cost; masks replace every boolean
    index, so the arithmetic has static shapes and no host synchronisation.
    """
    cost = (pred_boxes.float()[:, :, None] - gt_boxes[:, None]).abs().sum(-1)  # (B, A, K)
    cost = cost.masked_fill(~gt_mask[:, None], float("inf"))
    best, index = cost.min(-1)  # (B, A)
    has_targets = gt_mask.any(-1, keepdim=True)  # (B, 1)
    box = torch.where(has_targets, best, torch.zeros_like(best)).sum()
    box = box / gt_mask.sum().clamp(min=1)
    labels = gt_labels.gather(1, index)  # (B, A)
    target = F.one_hot(labels, pred_logits.shape[-1]).float() * has_targets[..., None]
    cls = F.binary_cross_entropy_with_logits(pred_logits.float(), target)
    return box_weight * box + cls, torch.stack([box, cls]).detach()
