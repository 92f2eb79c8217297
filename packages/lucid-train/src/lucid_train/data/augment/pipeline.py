"""The training augmentation pipeline: draw all parameters of a sample, then apply them.

`TrainAugment.sample` turns one seed into a `SampleParams` (pure data); `TrainAugment.apply`
renders it. Each stage draws from its own child of the sample's seed, so turning one stage off
(say copy-paste on a detection set) never shifts the draws of another.

Geometry per sample: with probability ``mosaic``, four tiles placed on a ``2S`` canvas, else the
sample letterboxed to ``S``; then the random affine to the ``S`` x ``S`` output. Each source is
resampled once with the composed matrix (mosaic placement or letterbox, then affine).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from lucid_train.data.augment.affine import AffineParams
from lucid_train.data.augment.config import AugmentConfig
from lucid_train.data.augment.copy_paste import CopyPasteParams, apply_copy_paste
from lucid_train.data.augment.flip import FlipParams, apply_flip
from lucid_train.data.augment.hsv import HsvParams, apply_hsv
from lucid_train.data.augment.letterbox import LetterboxParams
from lucid_train.data.augment.mixup import MixupParams, apply_mixup
from lucid_train.data.augment.mosaic import MosaicParams
from lucid_train.data.augment.warp import transform_targets, warp_image, warp_region_into
from lucid_train.data.targets import Targets

Loader = Callable[[int], tuple[Image.Image, Targets]]
"""Dataset index → decoded RGB image and its targets in that image's pixels."""


@dataclass(frozen=True)
class GeometryParams:
    """The geometric draw of one (main or mixup) sample: its index, mosaic (or None), affine."""

    index: int
    mosaic: MosaicParams | None
    affine: AffineParams


@dataclass(frozen=True)
class SampleParams:
    """Every draw of one training sample except copy-paste, which depends on the warped targets
    and is drawn inside `TrainAugment.apply` from its own stream (``paste_seed``)."""

    geometry: GeometryParams
    mixup: tuple[MixupParams, GeometryParams] | None
    hsv: HsvParams
    flip: FlipParams
    paste_seed: np.random.SeedSequence


class TrainAugment:
    """Full training augmentation for one output size.

    Args:
        cfg: probabilities and ranges.
        size: output canvas side ``S`` (pixels).
        load: reads a dataset index (see `Loader`).
        flip_index: keypoint permutation applied by a horizontal flip (pose only).
    """

    def __init__(
        self, cfg: AugmentConfig, size: int, load: Loader, flip_index: Sequence[int] = ()
    ) -> None:
        if size <= 0:
            raise ValueError(f"size: expected a positive canvas side, got {size}")
        self.cfg = cfg
        self.size = size
        self.load = load
        self.flip_index = tuple(flip_index)

    def _geometry(
        self, rng: np.random.Generator, index: int, pool: Sequence[int]
    ) -> GeometryParams:
        use_mosaic = rng.random() < self.cfg.mosaic
        mosaic = MosaicParams.sample(rng, pool) if use_mosaic else None
        return GeometryParams(index, mosaic, AffineParams.sample(rng, self.cfg))

    def sample(self, index: int, seed: np.random.SeedSequence, pool: Sequence[int]) -> SampleParams:
        """All draws for dataset ``index``; mosaic and mixup partners come from ``pool``."""
        geo_ss, mix_ss, paste_ss, color_ss = seed.spawn(4)
        geo, mix, color = (np.random.default_rng(s) for s in (geo_ss, mix_ss, color_ss))
        geometry = self._geometry(geo, index, pool)
        mixup = None
        if mix.random() < self.cfg.mixup:
            m = MixupParams.sample(mix, list(pool))
            mixup = (m, self._geometry(mix, m.partner, pool))
        return SampleParams(
            geometry,
            mixup,
            HsvParams.sample(color, self.cfg),
            FlipParams.sample(color, self.cfg.fliplr),
            paste_ss,
        )

    def render_geometry(self, g: GeometryParams) -> tuple[Image.Image, Targets]:
        """The geometric base of one sample: a ``S`` x ``S`` image and its filtered targets."""
        s = self.size
        out_rect = (0.0, 0.0, float(s), float(s))
        if g.mosaic is None:
            image, targets = self.load(g.index)
            lb = LetterboxParams.fit(image.height, image.width, s)
            m = g.affine.matrix((s, s), s) @ lb.matrix
            moved = transform_targets(
                targets, m, out_rect, min_size=self.cfg.min_size, min_visible=self.cfg.min_visible
            )
            return warp_image(image, m, (s, s), self.cfg.fill), moved
        indices = (g.index, *g.mosaic.partners)
        loaded = [self.load(i) for i in indices]
        placements = g.mosaic.placements([(im.height, im.width) for im, _ in loaded], s)
        affine = g.affine.matrix((2 * s, 2 * s), s)
        canvas = Image.new("RGB", (s, s), (self.cfg.fill,) * 3)
        parts = []
        for (image, targets), place in zip(loaded, placements, strict=True):
            warp_region_into(
                canvas, image, affine @ place.matrix, place.source_rect(), self.cfg.fill
            )
            parts.append(transform_targets(targets, place.matrix, place.rect, min_visible=0.0))
        moved = transform_targets(
            Targets.concat(parts),
            affine,
            out_rect,
            min_size=self.cfg.min_size,
            min_visible=self.cfg.min_visible,
        )
        return canvas, moved

    def apply(self, params: SampleParams) -> tuple[Image.Image, Targets]:
        """Render ``params``: geometry → mixup → copy-paste → HSV → flip."""
        image, targets = self.render_geometry(params.geometry)
        if params.mixup is not None:
            mix, geometry = params.mixup
            other, other_targets = self.render_geometry(geometry)
            image, targets = apply_mixup(image, targets, other, other_targets, mix)
        paste = CopyPasteParams.sample(
            np.random.default_rng(params.paste_seed), targets, image.width, self.cfg.copy_paste
        )
        image, targets = apply_copy_paste(image, targets, paste)
        image = apply_hsv(image, params.hsv)
        return apply_flip(image, targets, params.flip, self.flip_index)

    def __call__(
        self, index: int, seed: np.random.SeedSequence, pool: Sequence[int]
    ) -> tuple[Image.Image, Targets]:
        return self.apply(self.sample(index, seed, pool))
