"""Random affine (rotation, scale, shear, translation) with the letterbox fused in.

`AffineParams` holds one draw; `AffineParams.matrix` maps a *pre-affine canvas* of size
``(w, h)`` (the letterboxed image, or the 2x mosaic canvas) to the output canvas: move the
canvas centre to the origin, rotate and scale, shear, then move it to ``translate`` around the
output centre. The pipeline composes it with each source's own placement so that pixels are
resampled once, straight from the decoded source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lucid_train.data.augment.config import AugmentConfig
from lucid_train.data.augment.warp import F64, translation


@dataclass(frozen=True)
class AffineParams:
    """One random affine draw.

    Attributes:
        degrees: rotation, counter-clockwise on screen.
        scale: isotropic gain.
        shear_x, shear_y: shear angles in degrees.
        tx, ty: where the canvas centre lands, as a fraction of the output size (0.5 = centre).
    """

    degrees: float = 0.0
    scale: float = 1.0
    shear_x: float = 0.0
    shear_y: float = 0.0
    tx: float = 0.5
    ty: float = 0.5

    @classmethod
    def sample(cls, rng: np.random.Generator, cfg: AugmentConfig) -> AffineParams:
        return cls(
            degrees=float(rng.uniform(-cfg.degrees, cfg.degrees)),
            scale=float(rng.uniform(1 - cfg.scale, 1 + cfg.scale)),
            shear_x=float(rng.uniform(-cfg.shear, cfg.shear)),
            shear_y=float(rng.uniform(-cfg.shear, cfg.shear)),
            tx=float(rng.uniform(0.5 - cfg.translate, 0.5 + cfg.translate)),
            ty=float(rng.uniform(0.5 - cfg.translate, 0.5 + cfg.translate)),
        )

    def matrix(self, canvas: tuple[float, float], out_size: int) -> F64:
        """``(3, 3)`` pre-affine canvas ``(w, h)`` → ``out_size`` x ``out_size`` output."""
        a = math.radians(self.degrees)
        # Image y points down, so a counter-clockwise turn on screen is a negative math angle.
        c, s = math.cos(a) * self.scale, math.sin(a) * self.scale
        rot = np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]], np.float64)
        shear = np.array(
            [
                [1, math.tan(math.radians(self.shear_x)), 0],
                [math.tan(math.radians(self.shear_y)), 1, 0],
                [0, 0, 1],
            ],
            np.float64,
        )
        centre = translation(-canvas[0] / 2, -canvas[1] / 2)
        move = translation(self.tx * out_size, self.ty * out_size)
        return move @ shear @ rot @ centre
