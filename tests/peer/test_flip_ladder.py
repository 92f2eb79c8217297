"""The horizontal flip against the authors' (rung f): one image with boxes, outlines and
keypoints through our `apply_flip` and through their 8.4.190 `RandomFlip` (applied, computed at
test time) gives the same pixels and the same mirrored targets: boxes, each outline's points
(ours reversed to keep the ring's winding), keypoints permuted by the flip index with their
visibility."""

from __future__ import annotations

import random

import numpy as np
from PIL import Image

from lucid_train.data.augment import FlipParams, apply_flip
from lucid_train.data.targets import Targets

FLIP_INDEX = [0, 2, 1, 4, 3]  # a nose and two left / right pairs


def test_our_flip_mirrors_the_authors_pixels_and_targets() -> None:
    from ultralytics.data.augment import RandomFlip
    from ultralytics.utils.instance import Instances

    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (40, 57, 3), dtype=np.uint8)  # an odd width: no centre column
    boxes = np.array([[3.5, 4.0, 20.25, 30.0], [30.0, 2.0, 56.0, 11.5]], np.float32)
    rings = rng.uniform([0, 0], [57, 40], (2, 9, 2)).astype(np.float32)
    points = rng.uniform([0, 0], [57, 40], (2, 5, 2)).astype(np.float32)
    vis = np.array([[2, 1, 0, 2, 2], [0, 2, 2, 1, 2]], np.uint8)
    instances = Instances(
        boxes.copy(), segments=rings.copy(),
        keypoints=np.concatenate([points, vis[..., None].astype(np.float32)], -1),
        bbox_format="xyxy", normalized=False,
    )  # fmt: skip
    random.seed(0)
    theirs = RandomFlip(p=1.0, direction="horizontal", flip_idx=FLIP_INDEX)(
        {"img": image.copy(), "instances": instances, "cls": np.zeros((2, 1), np.float32)}
    )
    targets = Targets(
        boxes, np.array([0, 1], np.int64), polygons=tuple(rings),
        keypoints=points, keypoint_vis=vis,
    )  # fmt: skip
    flipped, ours = apply_flip(Image.fromarray(image), targets, FlipParams(True), FLIP_INDEX)

    np.testing.assert_array_equal(np.asarray(flipped), theirs["img"])
    their = theirs["instances"]
    their.convert_bbox(format="xyxy")
    np.testing.assert_allclose(ours.boxes, their.bboxes, atol=1e-5)
    assert ours.polygons is not None and ours.keypoints is not None
    for ring, their_ring in zip(ours.polygons, their.segments, strict=True):
        np.testing.assert_allclose(ring[::-1], their_ring, atol=1e-5)
    np.testing.assert_allclose(ours.keypoints, their.keypoints[..., :2], atol=1e-5)
    np.testing.assert_array_equal(ours.keypoint_vis, their.keypoints[..., 2].astype(np.uint8))
    assert not np.array_equal(ours.keypoint_vis, vis), "the flip index moved no visibility"
