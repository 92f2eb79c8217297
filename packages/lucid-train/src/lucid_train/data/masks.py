"""Instance masks on the prototype grid, rasterised from rings in the loader workers.

Segmentation prototypes live at stride 4, so masks are drawn straight at that resolution as one
``(H / 4, W / 4)`` int16 *instance map* per image: value ``j + 1`` marks instance ``j`` of that
image, 0 background. Larger instances are drawn first, so where rings overlap the smaller one
wins (it would otherwise vanish). `lucid_train.data.transport.Batch.instance_masks` expands the
map to one boolean mask per instance on the device.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw

from lucid_train.data.polygons import polygon_area

MASK_STRIDE = 4


def instance_map(
    rings: Sequence[npt.NDArray[np.float32]], height: int, width: int, stride: int = MASK_STRIDE
) -> npt.NDArray[np.int16]:
    """Rasterise ``rings`` (each ``(P, 2)`` canvas pixels) onto the ``stride`` grid of a
    ``height`` x ``width`` canvas; returns ``(height // stride, width // stride)`` int16."""
    if len(rings) >= np.iinfo(np.int16).max:
        raise ValueError(f"instance_map: at most 32766 instances per image, got {len(rings)}")
    h, w = height // stride, width // stride
    canvas = Image.new("I", (w, h), 0)
    draw = ImageDraw.Draw(canvas)
    order = sorted(range(len(rings)), key=lambda i: -polygon_area(rings[i]))
    for j in order:
        # ImageDraw truncates vertices to integers and fills both end cells of every span, which
        # grows a shape by about one cell; unshifted grid coordinates (cell c spans [c, c + 1))
        # centre that growth, half a cell on each side, instead of biasing one side.
        pts = np.asarray(rings[j], np.float64) / stride
        draw.polygon([(float(x), float(y)) for x, y in pts], fill=j + 1)
    return np.asarray(canvas, dtype=np.int32).astype(np.int16)
