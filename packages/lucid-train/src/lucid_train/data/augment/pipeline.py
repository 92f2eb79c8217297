"""The training augmentation pipeline: draw all parameters of a sample, then apply them.

`TrainAugment.sample` turns one seed into a `SampleParams` (pure data); `TrainAugment.plan` does
all label work and describes the pixels as a `PixelPlan`, which `render_cpu` paints with Pillow
(`TrainAugment.apply`) or `render_device` paints batched on the accelerator. Each stage draws from
its own child of the sample's seed, so turning one stage off (say copy-paste on a detection set)
never shifts the draws of another.

Geometry per sample: with probability ``mosaic``, four tiles placed on a ``2S`` canvas, else the
sample letterboxed to ``S``; then the random affine to the ``S`` x ``S`` output. Each source is
resampled once with the composed matrix (mosaic placement or letterbox, then affine).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from lucid_train.data.augment.affine import AffineParams
from lucid_train.data.augment.config import AugmentConfig
from lucid_train.data.augment.copy_paste import CopyPasteParams, paste_rings, pasted_targets
from lucid_train.data.augment.flip import FlipParams, flip_targets
from lucid_train.data.augment.hsv import HsvParams
from lucid_train.data.augment.letterbox import LetterboxParams
from lucid_train.data.augment.mixup import MixupParams
from lucid_train.data.augment.mosaic import MosaicParams
from lucid_train.data.augment.plan import PixelPlan, SizedImage, Tile
from lucid_train.data.augment.render_cpu import render_cpu, render_plane
from lucid_train.data.augment.warp import transform_targets
from lucid_train.data.targets import Targets

Loader = Callable[[int], tuple[SizedImage, Targets]]
"""Dataset index → its image (decoded RGB, or an undecoded file of known size when the pixels
are rendered on the device) and its targets in that image's pixels."""


def _pil(images: Mapping[int, SizedImage]) -> dict[int, Image.Image]:
    out = {}
    for index, image in images.items():
        if not isinstance(image, Image.Image):
            raise TypeError(
                f"source {index}: the CPU renderer needs decoded images, got {type(image).__name__}"
            )
        out[index] = image
    return out


@dataclass(frozen=True)
class GeometryParams:
    """The geometric draw of one (main or mixup) sample: its index, mosaic (or None), affine."""

    index: int
    mosaic: MosaicParams | None
    affine: AffineParams


@dataclass(frozen=True)
class SampleParams:
    """Every draw of one training sample. Copy-paste draws nothing: its choice follows from the
    warped targets (`CopyPasteParams.sample`, inside `TrainAugment.plan`)."""

    geometry: GeometryParams
    mixup: tuple[MixupParams, GeometryParams] | None
    hsv: HsvParams
    flip: FlipParams


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

    def sample(
        self,
        index: int,
        seed: np.random.SeedSequence,
        pool: Sequence[int],
        mix_pool: Sequence[int] | None = None,
    ) -> SampleParams:
        """All draws for dataset ``index``: mosaic partners come from ``pool``, the mixup partner
        from ``mix_pool`` (None: ``pool`` too), its own mosaic partners from ``pool``."""
        # four streams as when copy-paste drew from the third, so the others' draws are unchanged
        geo_ss, mix_ss, _, color_ss = seed.spawn(4)
        geo, mix, color = (np.random.default_rng(s) for s in (geo_ss, mix_ss, color_ss))
        geometry = self._geometry(geo, index, pool)
        mixup = None
        if mix.random() < self.cfg.mixup:
            m = MixupParams.sample(mix, pool if mix_pool is None else mix_pool)
            mixup = (m, self._geometry(mix, m.partner, pool))
        return SampleParams(
            geometry,
            mixup,
            HsvParams.sample(color, self.cfg),
            FlipParams.sample(color, self.cfg.fliplr),
        )

    def plan_geometry(
        self, g: GeometryParams, images: dict[int, SizedImage]
    ) -> tuple[tuple[Tile, ...], Targets]:
        """The tiles of one plane and their filtered targets; loads each source once into
        ``images`` (planning reads only its size)."""
        s = self.size
        out_rect = (0.0, 0.0, float(s), float(s))

        def load(index: int) -> tuple[SizedImage, Targets]:
            image, targets = self.load(index)
            images.setdefault(index, image)
            return image, targets

        if g.mosaic is None:
            image, targets = load(g.index)
            lb = LetterboxParams.fit(image.height, image.width, s)
            m = g.affine.matrix((s, s), s) @ lb.matrix
            floor = self.cfg.min_visible_for(targets.polygons is not None)
            moved = transform_targets(
                targets, m, out_rect, min_size=self.cfg.min_size, min_visible=floor
            )
            return (Tile(g.index, m),), moved
        indices = (g.index, *g.mosaic.partners)
        loaded = [load(i) for i in indices]
        placements = g.mosaic.placements([(im.height, im.width) for im, _ in loaded], s)
        affine = g.affine.matrix((2 * s, 2 * s), s)
        tiles, parts = [], []
        for index, (_, targets), place in zip(indices, loaded, placements, strict=True):
            tiles.append(Tile(index, affine @ place.matrix, place.source_rect()))
            parts.append(transform_targets(targets, place.matrix, place.rect, min_visible=0.0))
        joined = Targets.concat(parts)
        moved = transform_targets(
            joined,
            affine,
            out_rect,
            min_size=self.cfg.min_size,
            min_visible=self.cfg.min_visible_for(joined.polygons is not None),
        )
        return tuple(tiles), moved

    def render_geometry(self, g: GeometryParams) -> tuple[Image.Image, Targets]:
        """The geometric base of one sample: a ``S`` x ``S`` image and its filtered targets."""
        images: dict[int, SizedImage] = {}
        tiles, targets = self.plan_geometry(g, images)
        return render_plane(tiles, _pil(images), self.size, self.cfg.fill), targets

    def plan(self, params: SampleParams) -> tuple[PixelPlan, Targets, dict[int, SizedImage]]:
        """All label work of ``params`` and the plan of its pixels: geometry → mixup →
        copy-paste → HSV → flip. Returns the plan, the final targets and the loaded sources."""
        images: dict[int, SizedImage] = {}
        tiles, targets = self.plan_geometry(params.geometry, images)
        mixup = None
        if params.mixup is not None:
            mix, geometry = params.mixup
            other, other_targets = self.plan_geometry(geometry, images)
            mixup = (other, mix.ratio)
            targets = Targets.concat([targets, other_targets])
        s = self.size
        paste = CopyPasteParams.sample(targets, s, self.cfg.copy_paste)
        rings: tuple[np.ndarray, ...] = ()
        if paste.chosen:
            pasted = pasted_targets(targets, paste, s)
            rings = tuple(paste_rings(pasted))
            targets = Targets.concat([targets, pasted])
        if params.flip.flip:
            targets = flip_targets(targets, s, self.flip_index)
        plan = PixelPlan(s, self.cfg.fill, tiles, mixup, rings, params.hsv, params.flip.flip)
        return plan, targets, images

    def apply(self, params: SampleParams) -> tuple[Image.Image, Targets]:
        """Render ``params`` on the CPU (`render_cpu`): geometry → mixup → copy-paste → HSV →
        flip."""
        plan, targets, images = self.plan(params)
        return render_cpu(plan, _pil(images)), targets

    def __call__(
        self, index: int, seed: np.random.SeedSequence, pool: Sequence[int]
    ) -> tuple[Image.Image, Targets]:
        return self.apply(self.sample(index, seed, pool))
