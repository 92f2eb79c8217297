"""HSV jitter: a random hue shift and saturation / value gains, as one colour matrix.

The three draws are the authors' (hue shift as a fraction of the colour circle, saturation and
value multiplied by ``1 + gain``), but they are applied as a single 3x3 colour matrix in RGB
rather than through an RGB → HSV → RGB round trip (assumptions.md D13): the round trip costs
about 20 ms per 640² image in Pillow, the matrix about 1.5 ms. Value is exact (every channel,
hence the maximum, scales by ``1 + v``); saturation scales the distance from the grey of equal
luma; hue rotates colours about the grey axis (120° takes red to green, like HSV). Pass
``exact=True`` to `apply_hsv` for the HSV round trip with lookup tables instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image

from lucid_train.data.augment.config import AugmentConfig

_LUMA = np.array([0.299, 0.587, 0.114])


@dataclass(frozen=True)
class HsvParams:
    """One draw: ``hue`` shift as a fraction of the circle, ``saturation`` and ``value`` gains."""

    hue: float = 0.0
    saturation: float = 0.0
    value: float = 0.0

    @classmethod
    def sample(cls, rng: np.random.Generator, cfg: AugmentConfig) -> HsvParams:
        h, s, v = rng.uniform(-1, 1, size=3) * np.array([cfg.hsv_h, cfg.hsv_s, cfg.hsv_v])
        return cls(float(h), float(s), float(v))

    @property
    def is_identity(self) -> bool:
        return self.hue == 0 and self.saturation == 0 and self.value == 0

    def matrix(self) -> np.ndarray:
        """``(3, 3)`` float64 colour matrix: value gain · hue rotation · saturation gain."""
        sat = (1 + self.saturation) * np.eye(3) - self.saturation * np.outer(np.ones(3), _LUMA)
        a = 2 * math.pi * self.hue
        k = np.ones(3) / math.sqrt(3)
        cross = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
        rot = math.cos(a) * np.eye(3) + math.sin(a) * cross + (1 - math.cos(a)) * np.outer(k, k)
        out: np.ndarray = (1 + self.value) * rot @ sat
        return out


def _exact(image: Image.Image, params: HsvParams) -> Image.Image:
    x = np.arange(256, dtype=np.float64)
    lut_h = np.mod(x + params.hue * 256, 256).astype(np.uint8)
    lut_s = np.clip(x * (1 + params.saturation), 0, 255).astype(np.uint8)
    lut_v = np.clip(x * (1 + params.value), 0, 255).astype(np.uint8)
    h, s, v = image.convert("HSV").split()
    bands = (h.point(lut_h.tolist()), s.point(lut_s.tolist()), v.point(lut_v.tolist()))
    return Image.merge("HSV", bands).convert("RGB")


def apply_hsv(image: Image.Image, params: HsvParams, *, exact: bool = False) -> Image.Image:
    """Jittered RGB copy of ``image`` (identity parameters return it unchanged)."""
    if params.is_identity:
        return image
    if exact:
        return _exact(image, params)
    m = params.matrix()
    coeffs = tuple(float(v) for row in m for v in (*row, 0.0))
    return image.convert("RGB", coeffs)
