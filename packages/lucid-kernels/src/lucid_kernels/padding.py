"""Pad ragged per-image targets to a fixed capacity with a validity mask, and the inverse.

A recorded (static-shape) loss cannot take a batch whose images hold different numbers of
targets. :func:`pad_to_capacity` lays the per-image pieces ``(n_i, *trailing)`` out as one
``(B, capacity, *trailing)`` tensor, a ``(B, capacity)`` validity mask and ``(B,)`` counts;
:func:`unpad` gives the pieces back.

Contract:
    * Nothing is ever truncated. Before padding, :func:`capacity_report` says whether a batch
      fits and by how many rows each image overflows; :func:`pad_to_capacity` raises
      :class:`CapacityExceededError` (a ``ValueError`` naming the image, its count and the
      capacity) rather than drop rows. A caller that wants to fall back to eager asks
      :func:`capacity_report` first and never sees the exception.
    * ``unpad(pad_to_capacity(pieces, c))`` equals ``pieces`` exactly: values, dtypes, shapes and
      order, including a zero-row piece's own trailing shape such as keypoints ``(0, 0, 2)``
      beside ``(n, 17, 2)``.
    * A zero-row piece is empty whatever its trailing shape; row-holding pieces must share one
      trailing shape.
    * The padding slots hold ``fill``; the mask, not the fill value, says which rows are real.

Host synchronisation:
    Row counts come from the pieces' shapes, which the host already knows, so neither padding
    nor unpadding waits on the device. The only traffic is one small host-to-device copy of the
    counts and destination row indices; on CUDA it goes through pinned memory with
    ``non_blocking=True``, so the host does not wait for it. :func:`capacity_report` reads its
    counts on the host: handing it a device tensor synchronises; a list of ints such as
    ``[p.shape[0] for p in pieces]`` does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from lucid_kernels._pieces import check_pieces

__all__ = [
    "CapacityExceededError",
    "CapacityReport",
    "Padded",
    "capacity_report",
    "pad_positions",
    "pad_to_capacity",
    "unpad",
]


@dataclass(frozen=True)
class CapacityReport:
    """How a batch's per-image row counts sit against a capacity.

    Attributes:
        counts: rows per image, in batch order.
        capacity: the rows each image may hold.
    """

    counts: tuple[int, ...]
    capacity: int

    @property
    def overflow(self) -> tuple[int, ...]:
        """Rows over capacity per image (0 where an image fits)."""
        return tuple(max(0, count - self.capacity) for count in self.counts)

    @property
    def total_overflow(self) -> int:
        """Rows over capacity summed over the batch."""
        return sum(self.overflow)

    @property
    def over_capacity(self) -> tuple[int, ...]:
        """Indices of the images holding more rows than the capacity."""
        return tuple(i for i, count in enumerate(self.counts) if count > self.capacity)

    @property
    def fits(self) -> bool:
        """Whether every image fits, i.e. padding would lose nothing."""
        return not self.over_capacity

    @property
    def max_count(self) -> int:
        """The largest per-image count (0 for an empty batch): the smallest capacity that fits."""
        return max(self.counts, default=0)


class CapacityExceededError(ValueError):
    """Raised instead of truncating when an image holds more rows than the capacity.

    Attributes:
        report: the whole batch's :class:`CapacityReport`.
        index: the first image over capacity.
        count: that image's row count.
        capacity: the capacity it exceeds.
    """

    def __init__(self, report: CapacityReport) -> None:
        if report.fits:
            raise ValueError(f"a CapacityExceededError needs an image over capacity, got {report}")
        self.report = report
        self.index = report.over_capacity[0]
        self.count = report.counts[self.index]
        self.capacity = report.capacity
        super().__init__(
            f"image {self.index} holds {self.count} rows, over the capacity of {self.capacity} "
            f"({len(report.over_capacity)} image(s) over, {report.total_overflow} row(s) over in "
            f"total); nothing was truncated. To fix, raise the capacity to at least "
            f"{report.max_count} or run this batch eager (check capacity_report() first)"
        )


def capacity_report(counts: Sequence[int] | Tensor, capacity: int) -> CapacityReport:
    """Report whether per-image row counts fit ``capacity``, without padding anything.

    Args:
        counts: rows per image, ``(B,)`` integers. A tensor is read on the host, which
            synchronises with its device; pass ints (e.g. ``[p.shape[0] for p in pieces]``)
            to avoid that.
        capacity: rows each image may hold, ``>= 0``.

    Returns:
        A :class:`CapacityReport`; ``report.fits`` is ``False`` when padding would have to drop
        rows, and ``report.overflow`` says how many per image.
    """
    _check_capacity(capacity)
    if isinstance(counts, Tensor):
        if counts.dim() != 1 or counts.is_floating_point() or counts.is_complex():
            raise ValueError(
                f"expected counts as a 1-D integer tensor, got dtype {counts.dtype} and shape "
                f"{tuple(counts.shape)}"
            )
        values = tuple(int(c) for c in counts.tolist())
    else:
        values = tuple(int(c) for c in counts)
    negative = [i for i, c in enumerate(values) if c < 0]
    if negative:
        raise ValueError(f"expected counts >= 0, got {values[negative[0]]} at index {negative[0]}")
    return CapacityReport(counts=values, capacity=capacity)


@dataclass(frozen=True, eq=False)
class Padded:
    """Ragged per-image pieces laid out at a fixed capacity.

    Attributes:
        values: ``(B, capacity, *trailing)``, the rows of image ``i`` in ``values[i, :n_i]`` and
            ``fill`` after them.
        mask: ``(B, capacity)`` bool, ``True`` on real rows.
        counts: ``(B,)`` int64 on the values' device, ``n_i``.
        shapes: the original pieces' shapes (host metadata), which :func:`unpad` uses to hand
            back zero-row pieces with their own trailing shapes without reading the device.
    """

    values: Tensor
    mask: Tensor
    counts: Tensor
    shapes: tuple[torch.Size, ...]

    def __post_init__(self) -> None:
        batch = len(self.shapes)
        if self.values.dim() < 2 or self.values.shape[0] != batch:
            raise ValueError(
                f"expected values of shape ({batch}, capacity, ...), got {tuple(self.values.shape)}"
            )
        if tuple(self.mask.shape) != tuple(self.values.shape[:2]):
            raise ValueError(
                f"expected mask of shape {tuple(self.values.shape[:2])}, got "
                f"{tuple(self.mask.shape)}"
            )
        if tuple(self.counts.shape) != (batch,):
            raise ValueError(f"expected counts of shape ({batch},), got {tuple(self.counts.shape)}")

    @property
    def capacity(self) -> int:
        """Rows each image may hold."""
        return int(self.values.shape[1])

    @property
    def batch_size(self) -> int:
        """Number of images ``B``."""
        return len(self.shapes)

    @property
    def report(self) -> CapacityReport:
        """The batch's occupancy, from host metadata (no device read)."""
        return CapacityReport(tuple(int(s[0]) for s in self.shapes), self.capacity)


def pad_to_capacity(
    pieces: Sequence[Tensor],
    capacity: int,
    fill: float = 0.0,
    *,
    trailing_shape: Sequence[int] | None = None,
) -> Padded:
    """Pad per-image pieces ``(n_i, *trailing)`` to ``(B, capacity, *trailing)`` with a mask.

    Args:
        pieces: ``B >= 1`` tensors of shape ``(n_i, *trailing)``, one device and one dtype.
            Row-holding pieces share ``trailing``; a zero-row piece may have any trailing shape.
        capacity: rows per image in the result, ``>= 0``.
        fill: value of the padding slots.
        trailing_shape: the ``trailing`` to lay out. Defaults to the row-holding pieces' (or,
            when every piece is empty, piece 0's); pass it to keep a static layout such as
            ``(17, 3)`` for a batch in which every image may be empty.

    Returns:
        A :class:`Padded` with ``values (B, capacity, *trailing)``, ``mask (B, capacity)`` bool
        and ``counts (B,)`` int64, all on the pieces' device.

    Raises:
        CapacityExceededError: an image holds more than ``capacity`` rows; nothing is truncated.
        ValueError: no pieces, a 0-d piece, mixed devices or dtypes, or row-holding pieces whose
            trailing shapes disagree.
    """
    _check_capacity(capacity)
    if not pieces:
        raise ValueError("expected at least one piece, got none; a batch needs B >= 1 images")
    check_pieces(pieces)
    for index, piece in enumerate(pieces):
        if piece.dim() == 0:
            raise ValueError(
                f"expected pieces of shape (n, ...), got a 0-d tensor at index {index}; to fix, "
                "give each image its rows, e.g. piece.reshape(1)"
            )
    shapes = tuple(piece.shape for piece in pieces)
    report = CapacityReport(tuple(int(s[0]) for s in shapes), capacity)
    if not report.fits:
        raise CapacityExceededError(report)
    trailing = _trailing_shape(pieces, trailing_shape)

    first = pieces[0]
    device = first.device
    batch = len(pieces)
    values = torch.full((batch, capacity, *trailing), fill, dtype=first.dtype, device=device)

    # Destination row of every real row in values viewed as (B * capacity, *trailing), built on
    # the host from shapes and shipped with the counts in one copy: the slots holding a flat
    # position, in order (positions rise row-major).
    counts_host = torch.tensor(report.counts, dtype=torch.int64)
    destination = (_host_positions(counts_host, capacity).reshape(-1) >= 0).nonzero().squeeze(1)
    shipped = _to_device(torch.cat([counts_host, destination]), device)
    counts = shipped[:batch]

    holding = [piece for piece in pieces if piece.shape[0] > 0]
    if holding:
        values.view(batch * capacity, *trailing).index_copy_(0, shipped[batch:], torch.cat(holding))
    return Padded(values=values, mask=_mask(counts, capacity), counts=counts, shapes=shapes)


def pad_positions(
    counts: Sequence[int], capacity: int, device: torch.device | str = "cpu"
) -> Padded:
    """The flat row positions ``0 .. T-1`` of rows counted per image, laid out at ``capacity``.

    The same `Padded` as ``pad_to_capacity(list(torch.arange(T).split(counts)), capacity,
    fill=-1)``, built from the counts alone in a handful of operations (no pieces to check,
    split or copy): a caller gathers every field of its flat rows by ``values``. Once per
    training step on the host, where each operation may hand the interpreter to a thread
    painting the next batch.

    Args:
        counts: rows per image, ``B >= 1`` host ints.
        capacity: rows per image in the result, ``>= 0``.
        device: where the result lives (one host-to-device copy, as `pad_to_capacity`'s).

    Raises:
        CapacityExceededError: an image holds more than ``capacity`` rows.
    """
    report = capacity_report(counts, capacity)
    if not report.counts:
        raise ValueError("expected at least one count, got none; a batch needs B >= 1 images")
    if not report.fits:
        raise CapacityExceededError(report)
    batch = len(report.counts)
    counts_host = torch.tensor(report.counts, dtype=torch.int64)
    positions = _host_positions(counts_host, capacity)
    shipped = _to_device(torch.cat([counts_host, positions.reshape(-1)]), torch.device(device))
    counts_out = shipped[:batch]
    shapes = tuple(torch.Size([n]) for n in report.counts)
    return Padded(
        values=shipped[batch:].view(batch, capacity),
        mask=_mask(counts_out, capacity),
        counts=counts_out,
        shapes=shapes,
    )


def _host_positions(counts: Tensor, capacity: int) -> Tensor:
    """``(B, capacity)`` int64 on the host: image ``b``'s flat row positions in its first
    ``counts[b]`` slots, -1 after them (the layout both padders build)."""
    column = torch.arange(capacity, dtype=torch.int64)
    starts = (torch.cumsum(counts, 0) - counts).unsqueeze(1)
    return torch.where(column < counts.unsqueeze(1), starts + column, -1)


def _mask(counts: Tensor, capacity: int) -> Tensor:
    """``(B, capacity)`` bool on ``counts``' device, True on the real rows."""
    return torch.arange(capacity, device=counts.device).unsqueeze(0) < counts.unsqueeze(1)


def unpad(padded: Padded, values: Tensor | None = None) -> list[Tensor]:
    """Give back the per-image pieces of ``padded``; the inverse of :func:`pad_to_capacity`.

    Args:
        padded: the layout made by :func:`pad_to_capacity`.
        values: optionally, another ``(B, capacity, *rest)`` tensor laid out like
            ``padded.values`` (e.g. a per-target loss ``(B, capacity)``) to slice with the same
            counts. Its zero-row pieces come back as ``(0, *rest)``.

    Returns:
        ``B`` tensors: ``padded.values[i, :n_i]`` with piece ``i``'s original shape (zero-row
        pieces keep their own trailing shape), or ``values[i, :n_i]`` when ``values`` is given.
        Row-holding results are views into the padded tensor; clone them before writing into it.
        The counts are read from host metadata, so this never synchronises.
    """
    source = padded.values if values is None else values
    if tuple(source.shape[:2]) != tuple(padded.values.shape[:2]):
        raise ValueError(
            f"expected values of shape {tuple(padded.values.shape[:2])} + (...), got "
            f"{tuple(source.shape)}"
        )
    out: list[Tensor] = []
    for i, shape in enumerate(padded.shapes):
        rows = int(shape[0])
        if rows > 0:
            out.append(source[i, :rows])
        elif values is None:
            out.append(source.new_empty(shape))
        else:
            out.append(source.new_empty((0, *source.shape[2:])))
    return out


def _check_capacity(capacity: int) -> None:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
        raise ValueError(f"expected capacity as an int >= 0, got {capacity!r}")


def _trailing_shape(
    pieces: Sequence[Tensor], trailing_shape: Sequence[int] | None
) -> tuple[int, ...]:
    """The one trailing shape of the row-holding pieces, checked against ``trailing_shape``."""
    expected: tuple[int, ...] | None = None
    source = "trailing_shape"
    if trailing_shape is not None:
        expected = tuple(int(d) for d in trailing_shape)
    for index, piece in enumerate(pieces):
        if piece.shape[0] == 0:
            continue
        trailing = tuple(piece.shape[1:])
        if expected is None:
            expected, source = trailing, f"piece {index}"
        elif trailing != expected:
            raise ValueError(
                f"expected trailing shape {expected} (from {source}), got {trailing} at index "
                f"{index}; zero-row pieces may have any trailing shape, row-holding ones must agree"
            )
    if expected is None:
        expected = tuple(pieces[0].shape[1:])
    return expected


def _to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """Copy a small host tensor to ``device`` without making the host wait where possible."""
    if device.type == "cpu":
        return tensor
    if device.type == "cuda":
        # Pinned source + non_blocking queues the copy on the current stream; torch's caching
        # host allocator keeps the pinned block alive until the copy has run.
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)
