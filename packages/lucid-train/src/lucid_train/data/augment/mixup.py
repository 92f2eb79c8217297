"""MixUp: blend a second, independently augmented sample into the first.

The blend ratio is drawn from Beta(32, 32) (so close to 0.5), as the authors do; the targets of
both samples are kept. The partner's own geometric draw lives in the pipeline's parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from lucid_train.data.targets import Targets


@dataclass(frozen=True)
class MixupParams:
    """One mixup draw: the partner's dataset index and the weight of the first sample."""

    partner: int
    ratio: float

    @classmethod
    def sample(cls, rng: np.random.Generator, pool: Sequence[int]) -> MixupParams:
        return cls(int(pool[int(rng.integers(0, len(pool)))]), float(rng.beta(32.0, 32.0)))


def apply_mixup(
    image: Image.Image,
    targets: Targets,
    other: Image.Image,
    other_targets: Targets,
    params: MixupParams,
) -> tuple[Image.Image, Targets]:
    """``ratio * image + (1 - ratio) * other`` (same size), targets concatenated."""
    return Image.blend(image, other, 1.0 - params.ratio), Targets.concat([targets, other_targets])
