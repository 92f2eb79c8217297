"""Positive anchors packed into a fixed number of slots per image, for the costly task terms.

The mask loss (an ``h x w`` logit map per positive) and the keypoint flow cannot run over all
``A`` anchors; the authors index the positives, a data-dependent shape. Here each image gets
``P`` slots filled with its positives in anchor order, the rest marked empty, using a stable sort
(static shapes, no host synchronisation, deterministic order).

``P`` follows the target capacity ``M``, so a sum over the slots must not regroup with it: a
float sum whose length changes groups its terms differently (``torch.sum`` splits by length and
threads), and padding the same batch to another ``M`` would change the loss in its last bits.
:func:`positional_sum` adds by a pairwise tree fixed by position instead, so empty slots (exact
zeros) appended to an axis leave the result bitwise unchanged.

``P`` bounds the positives of an image without loss only if it is at least the assigner's
per-ground-truth cap times ``M``: top-k keeps at most ``topk`` anchors per ground truth and
conflicts only remove positives, so :func:`slot_capacity` gives that bound
(assumptions.md T28).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_train.assign.tal import TaskAlignedAssigner

__all__ = ["PositiveSlots", "positional_sum", "positive_slots", "slot_capacity"]


@dataclass
class PositiveSlots:
    """Where each image's positives went.

    Attributes:
        anchor: ``(B, P)`` int64 anchor row of each slot (0 on empty slots, a safe index).
        valid: ``(B, P)`` bool, slot holds a positive.
        dropped: ``(B,)`` int64 positives that did not fit (0 whenever ``P`` is the bound of
            :func:`slot_capacity`).
    """

    anchor: Tensor
    valid: Tensor
    dropped: Tensor

    def gather(self, per_anchor: Tensor) -> Tensor:
        """``(B, A, *rest)`` -> ``(B, P, *rest)``; empty slots hold anchor 0's values."""
        idx = self.anchor.view(*self.anchor.shape, *([1] * (per_anchor.dim() - 2)))
        return per_anchor.gather(1, idx.expand(-1, -1, *per_anchor.shape[2:]))


def slot_capacity(assigner: TaskAlignedAssigner, num_targets: int, num_anchors: int) -> int:
    """Slots that hold every positive ``assigner`` can make with ``num_targets`` rows per image."""
    per_target = assigner.topk
    if assigner.topk2 is not None:
        per_target = min(per_target, assigner.topk2)
    return max(1, min(num_anchors, per_target * num_targets))


def positive_slots(fg: Tensor, capacity: int) -> PositiveSlots:
    """Pack the ``(B, A)`` bool foreground into ``capacity`` slots per image, in anchor order."""
    capacity = min(capacity, fg.shape[1])
    order = torch.sort((~fg).to(torch.uint8), dim=1, stable=True).indices[:, :capacity]
    valid = fg.gather(1, order)
    dropped = (fg.sum(1) - capacity).clamp(min=0)
    return PositiveSlots(anchor=torch.where(valid, order, 0), valid=valid, dropped=dropped)


def _fold_sum(values: Tensor, dim: int) -> Tensor:
    """Sum over ``dim`` by a pairwise tree fixed by position: ``dim`` is zero-padded to a power
    of two and folded in halves (element ``i`` plus element ``i + half``) until one is left.

    Zeros appended along ``dim`` leave the result bitwise unchanged (they only ever add an exact
    0 to a partial sum), whatever the length; only elementwise adds run, so no host read.
    """
    x = values.movedim(dim, -1)
    n = x.shape[-1]
    if n == 0:
        return x.sum(-1)
    width = 1 << (n - 1).bit_length()
    if width > n:
        x = F.pad(x, (0, width - n))
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x.squeeze(-1)


def positional_sum(values: Tensor) -> Tensor:
    """0-d sum of every element, by :func:`_fold_sum` over each axis (last first): bitwise
    unchanged by zeros appended along any axis, e.g. empty slots when ``P`` grows with ``M``."""
    total = values
    for dim in reversed(range(values.dim())):
        total = _fold_sum(total, dim)
    return total
