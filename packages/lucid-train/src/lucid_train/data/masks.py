"""Instance masks on the prototype grid, rasterised from rings in the loader workers.

Segmentation prototypes live at stride 4, so masks are drawn straight at that resolution as one
``(H / 4, W / 4)`` int16 *instance map* per image: value ``j + 1`` marks instance ``j`` of that
image, 0 background. Cells follow the authors' targets (assumptions D14): the ring, densified to
1,000 points as their loader resamples every polygon, is filled at the canvas resolution from
integer points, its outline included, and the map is the bilinear
reduction of that fill by ``stride``, a cell on at 0.5 or more (at stride 4: when 2 of the 4
pixels around its centre are). Larger instances are drawn first, so where
rings overlap the smaller one wins (it would otherwise vanish).
`lucid_train.data.transport.Batch.instance_masks` expands the map to one boolean mask per
instance on the device.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw

from lucid_train.data.polygons import polygon_area

MASK_STRIDE = 4
RING_POINTS = 1000  # the authors' loader resamples every polygon to this many points


def densify(ring: npt.NDArray[np.float64], points: int = RING_POINTS) -> npt.NDArray[np.float64]:
    """``ring`` with ``points`` points: its vertices kept, the rest placed at evenly spaced
    positions of the vertex index along the closed ring (so every edge gets the same share,
    whatever its length), as the authors' loader resamples a polygon before augmentation. A
    ring with that many points already is returned as it is."""
    closed = np.concatenate([ring, ring[:1]])
    k = len(closed)
    if k >= points:
        return ring
    at = np.sort(np.concatenate([np.linspace(0, k - 1, points - k), np.arange(k)]))
    index = np.arange(k)
    return np.stack([np.interp(at, index, closed[:, 0]), np.interp(at, index, closed[:, 1])], -1)


def instance_map(
    rings: Sequence[npt.NDArray[np.float32]], height: int, width: int, stride: int = MASK_STRIDE
) -> npt.NDArray[np.int16]:
    """Rasterise ``rings`` (each ``(P, 2)`` canvas pixels) onto the ``stride`` grid of a
    ``height`` x ``width`` canvas; returns ``(height // stride, width // stride)`` int16."""
    if len(rings) >= np.iinfo(np.int16).max:
        raise ValueError(f"instance_map: at most 32766 instances per image, got {len(rings)}")
    h, w = height // stride, width // stride
    out = np.zeros((h, w), np.int16)
    order = sorted(range(len(rings)), key=lambda i: -polygon_area(rings[i]))
    for j in order:
        fill_ring(out, np.asarray(rings[j], np.float64), j + 1, stride)
    return out


def _taps(first: int, count: int, stride: int) -> tuple[npt.NDArray[np.int64], float]:
    """The lower of the two canvas pixels a ``stride``-fold bilinear reduction reads for each of
    the cells ``first .. first + count - 1``, and the weight of the upper one."""
    centre = (np.arange(first, first + count) + 0.5) * stride - 0.5
    low = np.floor(centre)
    return low.astype(np.int64), float(centre[0] - low[0])


def fill_ring(
    grid: npt.NDArray[np.int16], ring: npt.NDArray[np.float64], value: int, stride: int
) -> None:
    """Set the cells of ``grid`` (the ``stride`` grid) that the authors' fill-and-reduce of
    ``ring`` (``(P, 2)`` canvas pixels) turns on to ``value``. The fill runs on a patch around
    the ring only."""
    h, w = grid.shape
    if len(ring) < 3 or h == 0 or w == 0:
        return
    # Densified, then truncated to integers as the authors' int32 cast does: truncating every
    # point along an edge, not only its ends, moves the outline by up to a pixel along the edge
    # (their training targets hold about 2 % more cells than their raw polygons' fill).
    ring = np.trunc(densify(ring))
    lo, hi = ring.min(0), ring.max(0)
    c0, c1 = max(int(lo[0] // stride) - 1, 0), min(int(hi[0] // stride) + 2, w)
    r0, r1 = max(int(lo[1] // stride) - 1, 0), min(int(hi[1] // stride) + 2, h)
    if c0 >= c1 or r0 >= r1:
        return
    xs, wx = _taps(c0, c1 - c0, stride)
    ys, wy = _taps(r0, r1 - r0, stride)
    x0, y0 = int(xs[0]), int(ys[0])  # the patch's origin in canvas pixels
    patch = Image.new("L", (int(xs[-1]) - x0 + 2, int(ys[-1]) - y0 + 2), 0)
    flat = (ring - (x0, y0)).ravel().tolist()
    draw = ImageDraw.Draw(patch)
    draw.polygon(flat, fill=1)
    draw.line([*flat, *flat[:2]], fill=1, width=1)  # the outline, as the authors' fill draws it
    on = np.asarray(patch, np.float64)
    xi, yi = xs - x0, ys - y0
    level = (1 - wy) * ((1 - wx) * on[np.ix_(yi, xi)] + wx * on[np.ix_(yi, xi + 1)]) + wy * (
        (1 - wx) * on[np.ix_(yi + 1, xi)] + wx * on[np.ix_(yi + 1, xi + 1)]
    )
    block = grid[r0:r1, c0:c1]
    block[level >= 0.5] = value
