"""Letterbox: an aspect-preserving resize into a square canvas, with an exact inverse.

The forward map is ``x' = gain * x + pad_x``, ``y' = gain * y + pad_y`` with
``gain = size / max(h, w)`` and whole-pixel padding that centres the image. Pixels are
resampled through exactly this matrix, so the inverse ``x = (x' - pad_x) / gain`` is exact for
boxes, polygons, keypoints and rotated boxes (angles are unchanged by a uniform scale).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image

from lucid_train.data.augment.warp import F64, transform_targets, warp_image
from lucid_train.data.targets import Targets


@dataclass(frozen=True)
class LetterboxParams:
    """The letterbox of one image.

    Attributes:
        gain: scale from source to canvas pixels.
        pad_x, pad_y: left and top padding in canvas pixels (whole numbers).
        size: the square canvas side.
    """

    gain: float
    pad_x: float
    pad_y: float
    size: int

    @classmethod
    def fit(cls, height: int, width: int, size: int) -> LetterboxParams:
        gain = size / max(height, width)
        return cls(
            gain,
            float((size - round(width * gain)) // 2),
            float((size - round(height * gain)) // 2),
            size,
        )

    @property
    def matrix(self) -> F64:
        """``(3, 3)`` source → canvas."""
        return np.array(
            [[self.gain, 0, self.pad_x], [0, self.gain, self.pad_y], [0, 0, 1]], np.float64
        )

    def to_source(self, points: npt.ArrayLike) -> F64:
        """Canvas points ``(..., 2)`` back to source pixels ``(..., 2)`` (exact inverse)."""
        p = np.asarray(points, np.float64)
        out: F64 = (p - np.array([self.pad_x, self.pad_y])) / self.gain
        return out

    def boxes_to_source(self, boxes: npt.ArrayLike) -> F64:
        """Canvas boxes ``(N, 4)`` xyxy back to source pixels ``(N, 4)`` xyxy."""
        b = np.asarray(boxes, np.float64).reshape(-1, 2, 2)
        return self.to_source(b).reshape(-1, 4)

    def rboxes_to_source(self, rboxes: npt.ArrayLike) -> F64:
        """Canvas rotated boxes ``(N, 5)`` back to source pixels (centre moved, sides scaled)."""
        r = np.asarray(rboxes, np.float64).reshape(-1, 5).copy()
        r[:, :2] = self.to_source(r[:, :2])
        r[:, 2:4] /= self.gain
        return r


def letterbox(
    image: Image.Image, targets: Targets, size: int, fill: int = 114
) -> tuple[Image.Image, Targets, LetterboxParams]:
    """Letterbox ``image`` and ``targets`` onto a ``size`` x ``size`` canvas (validation path).

    Nothing is dropped: every instance maps inside the canvas by construction.
    """
    params = LetterboxParams.fit(image.height, image.width, size)
    out = warp_image(image, params.matrix, (size, size), fill)
    moved = transform_targets(targets, params.matrix, (0.0, 0.0, float(size), float(size)))
    return out, moved, params
