"""Move a list of per-image tensors to the host in one device-to-host transfer.

A batch's per-image results (boxes, scores, keypoints, ...) live on the device as one tensor per
image. Calling ``.cpu()`` on each costs one synchronising copy per image; :func:`host_split`
flattens every piece that holds values into one 1-D buffer, copies that buffer once, and views
the pieces back out of it.

Contract:
    * Values, dtypes, shapes and order are exactly those of ``[p.cpu() for p in pieces]``.
    * A piece without values (``numel() == 0``: a zero-row piece such as keypoints of shape
      ``(0, 0, 2)`` beside ``(n, 17, 2)``) comes back as its own empty host tensor with its own
      shape; it is never concatenated, so its trailing shape need not agree with anyone's.
    * Pieces may have different trailing shapes: they are flattened to 1-D before the one
      concatenation, never concatenated along rows.
    * A 0-d piece (a scalar) is treated as holding one value and comes back 0-d.

Note:
    The returned tensors are contiguous views into one fresh host buffer (one per call): they
    never alias the inputs, also when the inputs are already on the CPU, and their strides are
    the contiguous ones even where an input was a strided view. Autograd history is kept, as
    ``.cpu()`` keeps it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from lucid_kernels._pieces import check_pieces

__all__ = ["host_split"]


def host_split(pieces: Sequence[Tensor]) -> list[Tensor]:
    """Copy ``pieces`` to the host with one transfer and return them in order.

    Args:
        pieces: per-image tensors of any shapes, all on one device and of one dtype. Shapes may
            differ freely, e.g. keypoints ``(n_i, 17, 2)`` with ``(0, 0, 2)`` for an image
            without people.

    Returns:
        ``list[Tensor]`` of ``len(pieces)`` host tensors; element ``i`` equals
        ``pieces[i].cpu()`` in values, dtype and shape.

    Raises:
        ValueError: if the pieces do not share one device and one dtype (the message names the
            first piece that differs from piece 0).

    Example:
        An image without people keeps its canonical ``(0, 0, 2)`` keypoints beside 17-point
        neighbours:

        >>> import torch
        >>> from lucid_kernels import host_split
        >>> kpts = [torch.ones(2, 17, 2), torch.zeros(0, 0, 2), torch.full((1, 17, 2), 3.0)]
        >>> out = host_split(kpts)
        >>> [tuple(p.shape) for p in out]
        [(2, 17, 2), (0, 0, 2), (1, 17, 2)]
        >>> all(torch.equal(a, b.cpu()) for a, b in zip(out, kpts))
        True
        >>> host_split([])
        []
    """
    if not pieces:
        return []
    check_pieces(pieces)
    first = pieces[0]
    holding = [p for p in pieces if p.numel() > 0]
    chunks: Iterator[Tensor] = iter(())
    if holding:
        # One concatenation on the device, then the single device-to-host copy.
        flat = torch.cat([p.reshape(-1) for p in holding]).cpu()
        chunks = iter(torch.split(flat, [p.numel() for p in holding]))
    out: list[Tensor] = []
    for piece in pieces:
        if piece.numel() == 0:
            out.append(torch.empty(piece.shape, dtype=first.dtype, device="cpu"))
        else:
            out.append(next(chunks).view(piece.shape))
    return out
