"""Horizontal flip of an image and its targets.

The mirror is ``x -> W - x`` in continuous pixels, exactly what reversing the pixel columns does.
Rotated boxes mirror their angle and are re-canonicalised; keypoints are mirrored and then
permuted by the dataset's flip index (``left_*`` ↔ ``right_*``), visibility moving with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from lucid_train.data.rotated import canonical_rboxes
from lucid_train.data.targets import Targets


@dataclass(frozen=True)
class FlipParams:
    """One draw: whether to flip."""

    flip: bool = False

    @classmethod
    def sample(cls, rng: np.random.Generator, p: float) -> FlipParams:
        return cls(bool(rng.random() < p))


def flip_targets(targets: Targets, width: float, flip_index: Sequence[int] = ()) -> Targets:
    """Mirror ``targets`` of an image ``width`` pixels wide."""
    if not len(targets):
        return targets
    b = targets.boxes
    boxes = np.stack([width - b[:, 2], b[:, 1], width - b[:, 0], b[:, 3]], -1).astype(np.float32)
    polygons = None
    if targets.polygons is not None:
        # Reverse the ring so it keeps its winding after the mirror.
        polygons = tuple(
            np.stack([width - r[::-1, 0], r[::-1, 1]], -1).astype(np.float32)
            for r in targets.polygons
        )
    rboxes = None
    if targets.rboxes is not None:
        r = targets.rboxes.astype(np.float64).copy()
        r[:, 0] = width - r[:, 0]
        r[:, 4] = -r[:, 4]
        rboxes = canonical_rboxes(r)
    keypoints, vis = targets.keypoints, targets.keypoint_vis
    if keypoints is not None and vis is not None:
        keypoints = keypoints.copy()
        keypoints[..., 0] = width - keypoints[..., 0]
        if flip_index:
            order = np.asarray(flip_index, np.int64)
            keypoints, vis = keypoints[:, order], vis[:, order]
    return targets.replace(
        boxes=boxes, polygons=polygons, rboxes=rboxes, keypoints=keypoints, keypoint_vis=vis
    )


def apply_flip(
    image: Image.Image, targets: Targets, params: FlipParams, flip_index: Sequence[int] = ()
) -> tuple[Image.Image, Targets]:
    """Flip ``image`` and ``targets`` when ``params.flip``; otherwise return them unchanged."""
    if not params.flip:
        return image, targets
    return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT), flip_targets(
        targets, image.width, flip_index
    )
