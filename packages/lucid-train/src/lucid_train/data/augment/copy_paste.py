"""Copy-paste in ``flip`` mode: paste mirrored copies of some instances into their own image.

An instance is eligible when its mirrored box covers less than 30% of every existing box's area
(intersection over the existing box, the authors' ``bbox_ioa``). Of the eligible instances, the
``round(p * n)`` whose mirrored boxes overlap the others least are cut out of the mirrored image
along their rings and pasted, and their mirrored targets appended in that order: the authors'
8.4.190 choice, which draws nothing at random. Needs rings: polygons (segment) or rotated-box
corners (obb); other tasks draw nothing (assumptions.md D2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from lucid_train.data.augment.flip import flip_targets
from lucid_train.data.rotated import rbox_corners
from lucid_train.data.targets import Targets

MAX_OVERLAP = 0.30


def _ioa(boxes: np.ndarray, others: np.ndarray) -> np.ndarray:
    """``(N, M)``: overlap of ``boxes`` (N, 4) with ``others`` (M, 4) over each of ``others``'
    areas (how much of an existing box a pasted one would cover)."""
    lt = np.maximum(boxes[:, None, :2], others[None, :, :2])
    rb = np.minimum(boxes[:, None, 2:], others[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)
    area = np.clip(others[:, 2:] - others[:, :2], 0, None).prod(-1)
    out: np.ndarray = inter / (area + 1e-7)[None, :]  # (N, M); the authors' epsilon
    return out


@dataclass(frozen=True)
class CopyPasteParams:
    """The instances to paste mirrored, in pasting order (may be empty)."""

    chosen: tuple[int, ...] = ()

    @classmethod
    def sample(cls, targets: Targets, width: float, p: float) -> CopyPasteParams:
        """The least-overlapping ``round(p * n)`` of the ``n`` eligible instances; nothing
        random, so a sample's targets alone decide it."""
        if p <= 0 or not len(targets) or (targets.polygons is None and targets.rboxes is None):
            return cls()
        # float32 as theirs: numpy sorts each dtype with its own routine, so the same dtype and
        # the default argsort give the authors' order, ties (many overlaps are 0) included
        mirrored = flip_targets(targets, width).boxes.astype(np.float32)
        overlap = _ioa(mirrored, targets.boxes.astype(np.float32)).max(1)
        eligible = np.flatnonzero(overlap < MAX_OVERLAP)
        order = eligible[np.argsort(overlap[eligible])]
        return cls(tuple(int(i) for i in order[: round(p * len(eligible))]))


def _rings(targets: Targets) -> list[np.ndarray]:
    if targets.polygons is not None:
        return [r.astype(np.float64) for r in targets.polygons]
    assert targets.rboxes is not None  # sample() draws nothing otherwise
    return list(rbox_corners(targets.rboxes))


def paste_mask(rings: list[np.ndarray], size: tuple[int, int]) -> Image.Image:
    """The ``L`` mask (255 inside) of ``rings`` on a ``(w, h)`` image: where copy-paste pastes."""
    mask = Image.new("L", size, 0)
    draw = ImageDraw.Draw(mask)
    for ring in rings:
        # Unshifted coordinates keep ImageDraw's half-pixel growth centred (see data.masks).
        draw.polygon([(float(x), float(y)) for x, y in ring], fill=255)
    return mask


def pasted_targets(targets: Targets, params: CopyPasteParams, width: float) -> Targets:
    """The mirrored copies of the chosen instances (empty when nothing was chosen)."""
    return flip_targets(targets.select(list(params.chosen)), width)


def paste_rings(pasted: Targets) -> list[np.ndarray]:
    """The rings along which the ``pasted`` instances are cut out."""
    return _rings(pasted) if len(pasted) else []


def apply_copy_paste(
    image: Image.Image, targets: Targets, params: CopyPasteParams
) -> tuple[Image.Image, Targets]:
    """Paste the chosen instances mirrored; identity when nothing was chosen."""
    if not params.chosen:
        return image, targets
    pasted = pasted_targets(targets, params, image.width)
    return paste_mirrored(image, paste_rings(pasted)), Targets.concat([targets, pasted])


def paste_mirrored(image: Image.Image, rings: list[np.ndarray]) -> Image.Image:
    """``image`` with the mirrored image pasted inside ``rings`` (a copy)."""
    out = image.copy()
    out.paste(
        image.transpose(Image.Transpose.FLIP_LEFT_RIGHT), (0, 0), paste_mask(rings, image.size)
    )
    return out
