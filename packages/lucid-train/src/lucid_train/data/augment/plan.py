"""What one training sample's pixels are made of: a `PixelPlan`, pure data.

`TrainAugment.plan` does every draw and all label work in the loader worker and describes the
pixels as a plan; a renderer then paints it: `render_cpu` with Pillow in the worker, or
`render_device` in one batched pass on the accelerator once the batch is there. Both read the same
plan, so the labels are the same bits whichever renders.

A plane is the geometric base of one sample (or of its mixup partner): tiles painted in order on
a ``fill`` grey square, each tile a source image resampled through one matrix, the source → output
map already composed (letterbox or mosaic placement, then the random affine).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from lucid_train.data.augment.hsv import HsvParams
from lucid_train.data.augment.warp import F64, Rect


class SizedImage(Protocol):
    """What planning needs of a source: its stored size (a PIL image, or an undecoded file)."""

    @property
    def width(self) -> int: ...

    @property
    def height(self) -> int: ...


@dataclass(frozen=True)
class Tile:
    """One source resampled into a plane.

    Attributes:
        source: the dataset index of the source image.
        matrix: ``(3, 3)`` source pixels → output pixels.
        region: the part of the source to paint, in source pixels ``(x0, y0, x1, y1)`` (a mosaic
            tile), or None for the whole image (a letterboxed sample).
    """

    source: int
    matrix: F64
    region: Rect | None = None


@dataclass(frozen=True)
class PixelPlan:
    """Every pixel operation of one sample, in the order a renderer applies them.

    Attributes:
        size: output side ``S``.
        fill: grey of the padding.
        base: the sample's plane.
        mixup: the partner's plane and the weight of ``base`` in the blend, or None.
        paste: rings (output pixels) of the mirrored instances copy-paste pastes, cut from the
            mirrored image; empty when nothing is pasted.
        hsv: the colour jitter.
        flip: whether the result is mirrored horizontally.
    """

    size: int
    fill: int
    base: tuple[Tile, ...]
    mixup: tuple[tuple[Tile, ...], float] | None
    paste: tuple[npt.NDArray[np.float64], ...]
    hsv: HsvParams
    flip: bool

    @property
    def sources(self) -> tuple[int, ...]:
        """Dataset indices of every source the plan reads, first use first, without repeats."""
        tiles = self.base + (self.mixup[0] if self.mixup is not None else ())
        return tuple(dict.fromkeys(t.source for t in tiles))
