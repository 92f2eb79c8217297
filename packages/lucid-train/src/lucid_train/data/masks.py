"""Instance masks on the prototype grid, rasterised from rings in the loader workers.

Segmentation prototypes live at stride 4, so masks are drawn straight at that resolution as one
``(H / 4, W / 4)`` int16 *instance map* per image: value ``j + 1`` marks instance ``j`` of that
image, 0 background. A cell belongs to a ring when its centre lies inside it (even-odd rule),
which is what the authors' full-resolution fill followed by a 4x bilinear reduction keeps, with
no growth (assumptions D14). Larger instances are drawn first, so where rings overlap the
smaller one wins (it would otherwise vanish). `lucid_train.data.transport.Batch.instance_masks`
expands the map to one boolean mask per instance on the device.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from lucid_train.data.polygons import polygon_area

MASK_STRIDE = 4
_CHUNK = 1 << 22  # edge x row x column tests per block, to bound memory on huge polygons


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
        fill_centres(out, np.asarray(rings[j], np.float64) / stride, j + 1)
    return out


def fill_centres(grid: npt.NDArray[np.int16], ring: npt.NDArray[np.float64], value: int) -> None:
    """Set ``grid`` cells whose centre ``(c + 0.5, r + 0.5)`` lies inside ``ring`` (``(P, 2)``
    in grid units, even-odd rule) to ``value``."""
    h, w = grid.shape
    if len(ring) < 3 or h == 0 or w == 0:
        return
    lo, hi = ring.min(0), ring.max(0)
    c0, c1 = max(int(np.floor(lo[0] - 0.5)), 0), min(int(np.ceil(hi[0] - 0.5)) + 1, w)
    r0, r1 = max(int(np.floor(lo[1] - 0.5)), 0), min(int(np.ceil(hi[1] - 0.5)) + 1, h)
    if c0 >= c1 or r0 >= r1:
        return
    a, b = ring, np.roll(ring, -1, axis=0)  # edges a -> b
    xs = np.arange(c0, c1) + 0.5
    rows = max(1, _CHUNK // max(len(ring) * (c1 - c0), 1))
    for start in range(r0, r1, rows):
        ys = np.arange(start, min(start + rows, r1)) + 0.5
        # an edge crosses the horizontal line through a centre when its ends straddle it
        crosses = (a[:, 1, None] > ys) != (b[:, 1, None] > ys)  # (E, R)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (ys - a[:, 1, None]) / (b[:, 1, None] - a[:, 1, None])
        x_at = a[:, 0, None] + t * (b[:, 0, None] - a[:, 0, None])  # (E, R)
        hits = crosses[:, :, None] & (x_at[:, :, None] > xs)  # (E, R, C): crossings right of it
        inside = hits.sum(0) % 2 == 1
        block = grid[start : start + len(ys), c0:c1]
        block[inside] = value
