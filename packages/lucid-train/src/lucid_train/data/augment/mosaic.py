"""Mosaic: four images around a random centre of a ``2 size`` x ``2 size`` canvas.

The canvas is never materialised: `MosaicParams.placements` gives, per tile, the matrix from
the tile's source pixels to the canvas (a letterbox-style resize to ``size`` on the long side,
then the placement) and the canvas rectangle the tile may cover. The pipeline composes each
placement with the random affine and resamples every tile once, straight into the output.

Tile order: 0 top-left (the sample itself), 1 top-right, 2 bottom-left, 3 bottom-right; each
tile touches the centre with one corner and is cut by the canvas border.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lucid_train.data.augment.warp import F64, Rect, scaling, translation


@dataclass(frozen=True)
class TilePlacement:
    """Where one tile goes: ``matrix`` (3, 3) source → canvas and the canvas ``rect`` it covers."""

    matrix: F64
    rect: Rect

    def source_rect(self) -> Rect:
        """``rect`` in the tile's source pixels (the placement is an axis-aligned scale + shift)."""
        inv = np.linalg.inv(self.matrix)
        (x0, y0), (x1, y1) = (
            inv[:2, :2] @ np.array(p) + inv[:2, 2] for p in (self.rect[:2], self.rect[2:])
        )
        return (float(x0), float(y0), float(x1), float(y1))


@dataclass(frozen=True)
class MosaicParams:
    """One mosaic draw.

    Attributes:
        partners: dataset indices of tiles 1, 2 and 3.
        cx, cy: the centre, as a fraction of the canvas (uniform in [0.25, 0.75]).
    """

    partners: tuple[int, int, int]
    cx: float
    cy: float

    @classmethod
    def sample(cls, rng: np.random.Generator, pool: Sequence[int]) -> MosaicParams:
        """Draw three partners (with replacement) from ``pool`` and a centre."""
        picks = rng.integers(0, len(pool), size=3)
        cx, cy = rng.uniform(0.25, 0.75, size=2)
        return cls(
            (int(pool[picks[0]]), int(pool[picks[1]]), int(pool[picks[2]])), float(cx), float(cy)
        )

    def placements(self, sizes: Sequence[tuple[int, int]], size: int) -> list[TilePlacement]:
        """Per tile ``(height, width)`` in ``sizes`` (4 entries), its placement on the canvas."""
        side = 2 * size
        xc, yc = self.cx * side, self.cy * side
        out = []
        for k, (h, w) in enumerate(sizes):
            g = size / max(h, w)
            tw, th = w * g, h * g
            ox = xc - tw if k in (0, 2) else xc
            oy = yc - th if k in (0, 1) else yc
            rect = (max(ox, 0.0), max(oy, 0.0), min(ox + tw, side), min(oy + th, side))
            out.append(TilePlacement(translation(ox, oy) @ scaling(g), rect))
        return out
