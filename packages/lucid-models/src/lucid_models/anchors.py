"""The anchor grid: one anchor per cell of each head level."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["STRIDES", "make_anchors"]

STRIDES = (8, 16, 32)


def make_anchors(
    feature_sizes: Sequence[tuple[int, int]],
    strides: Sequence[int] = STRIDES,
    *,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """Cell-centre anchors for each level, levels in order, each row-major (y, then x).

    Args:
        feature_sizes: ``(h, w)`` of each level.
        strides: the stride of each level.

    Returns:
        ``points``: ``(A, 2)`` ``(x + 0.5, y + 0.5)`` in grid units of the anchor's level;
        ``anchor_strides``: ``(A, 1)``. ``A = sum(h * w)``, 8400 at 640x640.
    """
    points, anchor_strides = [], []
    for (h, w), stride in zip(feature_sizes, strides, strict=True):
        ys = torch.arange(h, device=device, dtype=dtype) + 0.5
        xs = torch.arange(w, device=device, dtype=dtype) + 0.5
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")  # (h, w) each
        points.append(torch.stack((grid_x, grid_y), -1).view(-1, 2))  # (h * w, 2)
        anchor_strides.append(torch.full((h * w, 1), float(stride), device=device, dtype=dtype))
    return torch.cat(points), torch.cat(anchor_strides)
