"""Ground truth laid out at a fixed capacity per image, for a loss that must keep static shapes.

A :class:`~lucid_train.data.Batch` carries its ``T`` instances flat, with ``batch_idx`` naming
each one's image. The assigner and the losses want ``(B, M, ...)`` tensors with a validity mask
instead, and a recorded (graph-captured) loss wants ``M`` fixed across steps. :func:`pad_targets`
builds that layout with :func:`lucid_kernels.pad_positions`; nothing is ever truncated.

Host synchronisation: the per-image counts decide the layout, so they are read on the host. Pad a
batch while it is still on the host (the DataModule's collate output, before ``to(device)``) and
move the :class:`PaddedTargets` afterwards: then nothing waits on a device. A batch already on a
device costs one small read of ``batch_idx`` (assumptions.md T11), unless ``counts`` is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

import torch
from torch import Tensor

from lucid_kernels import CapacityReport, capacity_report, pad_positions

if TYPE_CHECKING:
    from lucid_train.data.transport import Batch

__all__ = ["PaddedTargets", "batch_capacity_report", "capacity_fits", "pad_targets"]


@dataclass
class PaddedTargets:
    """A batch's targets at a fixed capacity ``M`` per image; row ``m`` of image ``b`` is real
    where ``mask[b, m]``. Padding rows hold zeros (``instance_index`` -1) and are never assigned.

    Attributes:
        boxes: ``(B, M, 4)`` float32 xyxy pixels of the input canvas.
        labels: ``(B, M)`` int64 class ids, 0 on padding (so they stay valid gather indices).
        mask: ``(B, M)`` bool, ``True`` on real instances.
        counts: ``(B,)`` int64 real instances per image.
        instance_index: ``(B, M)`` int64 position of the instance in the batch's flat order
            (``T``), -1 on padding; segmentation fetches instance masks with it.
        rboxes: obb, ``(B, M, 5)`` float32 ``(cx, cy, w, h, angle)`` long-edge (assumptions D3).
        keypoints: pose, ``(B, M, K, 3)`` float32 ``(x, y, visibility)`` pixels.
        difficult: ``(B, M)`` bool, the DOTA difficult flag (False on padding).
    """

    boxes: Tensor
    labels: Tensor
    mask: Tensor
    counts: Tensor
    instance_index: Tensor
    rboxes: Tensor | None = None
    keypoints: Tensor | None = None
    difficult: Tensor | None = None

    @property
    def capacity(self) -> int:
        """``M``, the rows each image holds."""
        return int(self.mask.shape[1])

    @property
    def batch_size(self) -> int:
        """``B``."""
        return int(self.mask.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Self:
        """Every tensor field moved to ``device`` (``non_blocking`` as in ``Tensor.to``); a
        subclass keeps its type and its own fields."""
        moved = {
            f.name: value.to(device, non_blocking=non_blocking)
            for f in dataclasses.fields(self)
            if isinstance(value := getattr(self, f.name), Tensor)
        }
        return dataclasses.replace(self, **moved)


def _host_counts(batch: Batch, counts: Sequence[int] | None) -> list[int]:
    """Instances per image, as host ints (reads ``batch_idx``: a sync if it is on a device)."""
    if counts is not None:
        values = [int(c) for c in counts]
        if len(values) != len(batch) or sum(values) != int(batch.batch_idx.shape[0]):
            raise ValueError(
                f"expected {len(batch)} counts summing to {batch.batch_idx.shape[0]}, got {values}"
            )
        return values
    return [int(c) for c in torch.bincount(batch.batch_idx, minlength=len(batch)).tolist()]


def batch_capacity_report(
    batch: Batch, capacity: int, counts: Sequence[int] | None = None
) -> CapacityReport:
    """How the per-image instance counts of ``batch`` sit against ``capacity``."""
    return capacity_report(_host_counts(batch, counts), capacity)


def capacity_fits(batch: Batch, capacity: int, counts: Sequence[int] | None = None) -> bool:
    """Whether every image of ``batch`` holds at most ``capacity`` instances.

    A caller holding a recorded loss at capacity ``M`` asks this first and runs an overflowing
    batch eager (at its own capacity) instead of truncating it.
    """
    return batch_capacity_report(batch, capacity, counts).fits


def pad_targets(
    batch: Batch,
    capacity: int | None = None,
    *,
    counts: Sequence[int] | None = None,
    rotated: bool | None = None,
) -> PaddedTargets:
    """Lay out a batch's flat targets at ``capacity`` rows per image.

    Args:
        batch: a :class:`~lucid_train.data.Batch` (flat ``T`` instances sorted by image). Best
            on the host (see the module docstring); tensors come back on its device.
        capacity: rows per image ``M``; ``None`` uses the batch's own largest count, at least
            1 (a zero-width layout would give the assigner nothing to reduce over).
        counts: instances per image if the caller already has them on the host; skips reading
            ``batch_idx``.
        rotated: include ``rboxes``. ``None`` infers it: included when ``batch.rboxes`` has one
            row per instance (obb batches, and every batch with ``T == 0``).

    Returns:
        :class:`PaddedTargets`; ``keypoints`` is set when the batch has ``K > 0`` keypoints.

    Raises:
        lucid_kernels.CapacityExceededError: an image holds more than ``capacity`` instances.
    """
    per_image = _host_counts(batch, counts)
    cap = max(max(per_image, default=0), 1) if capacity is None else capacity
    total = int(batch.batch_idx.shape[0])
    device = batch.boxes.device
    # One padding of the flat instance positions; every field is then gathered by them, so a
    # single host-to-device copy (inside pad_positions) serves all fields.
    padded = pad_positions(per_image, cap, device)
    index, mask = padded.values, padded.mask  # (B, M) each
    safe = index.clamp(min=0)

    def gather(flat: Tensor) -> Tensor:
        """``(T, *rest)`` -> ``(B, M, *rest)``, zeros on padding rows."""
        out = flat.new_zeros((*index.shape, *flat.shape[1:]))
        if total == 0:
            return out
        picked = flat[safe]
        keep = mask.view(*mask.shape, *([1] * (flat.dim() - 1)))
        return torch.where(keep, picked, out)

    with_rboxes = (batch.rboxes.shape[0] == total) if rotated is None else rotated
    if with_rboxes and batch.rboxes.shape[0] != total:
        raise ValueError(
            f"rotated=True but the batch has {batch.rboxes.shape[0]} rboxes for {total} instances"
        )
    with_keypoints = batch.keypoints.dim() == 3 and batch.keypoints.shape[1] > 0
    return PaddedTargets(
        boxes=gather(batch.boxes.float()),
        labels=gather(batch.labels.long()),
        mask=mask,
        counts=padded.counts,
        instance_index=index,
        rboxes=gather(batch.rboxes.float()) if with_rboxes else None,
        keypoints=gather(batch.keypoints.float()) if with_keypoints else None,
        difficult=gather(batch.difficult.bool()),
    )
