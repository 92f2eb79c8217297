"""Validation shared by the ragged per-image helpers (``host_split``, ``padding``)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor


def check_pieces(pieces: Sequence[Tensor]) -> None:
    """Raise unless every piece is a tensor sharing piece 0's device and dtype.

    Raises:
        TypeError: a piece is not a tensor.
        ValueError: a piece's device or dtype differs from piece 0's; the message names it.
    """
    first = pieces[0]
    for index, piece in enumerate(pieces):
        if not isinstance(piece, Tensor):
            raise TypeError(
                f"expected a sequence of tensors, got {type(piece).__name__} at index {index}"
            )
        if piece.device != first.device:
            raise ValueError(
                f"expected all pieces on {first.device} (the device of piece 0), got "
                f"{piece.device} at index {index}; to fix, move the pieces to one device first"
            )
        if piece.dtype != first.dtype:
            raise ValueError(
                f"expected all pieces of dtype {first.dtype} (the dtype of piece 0), got "
                f"{piece.dtype} at index {index}; to fix, cast the pieces to one dtype first"
            )
