"""MixUp against the authors' (rung f; peer-equivalence's "no test holds yet: the Beta(32, 32)
draw"): the same ratio through our `apply_mixup` and through their 8.4.190 `MixUp` (computed at
test time) blends the same pixels and keeps both samples' targets in the same order, and our
ratios are drawn from the distribution theirs are."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from PIL import Image

from lucid_train.data.augment import MixupParams, apply_mixup
from lucid_train.data.targets import Targets

BASE_BOXES = [[5.0, 5.0, 20.0, 20.0], [30.0, 10.0, 40.0, 30.0]]
PARTNER_BOXES = [[1.0, 2.0, 10.0, 12.0]]


def _their_labels(img: np.ndarray, boxes: list[list[float]], classes: list[int]) -> dict[str, Any]:
    from ultralytics.utils.instance import Instances

    instances = Instances(
        np.array(boxes, np.float32), segments=np.zeros((0, 1000, 2), np.float32),
        bbox_format="xyxy", normalized=False,
    )  # fmt: skip
    return {"img": img, "instances": instances, "cls": np.array(classes, np.float32)[:, None]}


def _their_mixup(partner: np.ndarray) -> Any:
    """Their transform, always applied, its one partner served by a dataset of one image."""
    from ultralytics.data.augment import MixUp

    class OneImage:
        def __len__(self) -> int:
            return 1

        def get_image_and_label(self, index: int) -> dict[str, Any]:
            return _their_labels(partner.copy(), PARTNER_BOXES, [1])

    return MixUp(OneImage(), p=1.0)


def _images(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:48, 0:64]
    smooth = np.stack([xx * 4, yy * 5, (xx + yy) * 2], -1) + rng.normal(0, 30, (48, 64, 3))
    base = np.clip(smooth, 0, 255).astype(np.uint8)
    return base, rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)


@pytest.mark.parametrize("seed", range(6))
def test_our_mixup_blends_the_authors_pixels_and_keeps_both_targets(seed: int) -> None:
    base, partner = _images(seed)
    # Their ratio is one draw of numpy's global generator (after Python's `random` picks the
    # partner and decides to apply it); the same draw, made first, is the ratio we are given.
    np.random.seed(seed)
    ratio = float(np.random.beta(32.0, 32.0))
    np.random.seed(seed)
    random.seed(seed)
    theirs = _their_mixup(partner)(_their_labels(base.copy(), BASE_BOXES, [0, 2]))
    image, targets = apply_mixup(
        Image.fromarray(base),
        Targets(np.array(BASE_BOXES, np.float32), np.array([0, 2], np.int64)),
        Image.fromarray(partner),
        Targets(np.array(PARTNER_BOXES, np.float32), np.array([1], np.int64)),
        MixupParams(partner=0, ratio=ratio),
    )
    ours = np.asarray(image).astype(int)
    assert not np.array_equal(theirs["img"], base), "their transform blended nothing"
    differ = np.abs(ours - theirs["img"].astype(int))
    # both truncate the blend to 8 bits; Pillow weighs in float32, theirs in float64, so a
    # value within a rounding of a whole level can land a level apart
    assert differ.max() <= 1 and (differ > 0).mean() <= 0.001, (differ > 0).mean()
    np.testing.assert_array_equal(targets.boxes, theirs["instances"].bboxes)
    np.testing.assert_array_equal(targets.labels, theirs["cls"].ravel().astype(np.int64))


def _ecdf_distance(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two ECDFs."""
    grid = np.sort(np.concatenate([a, b]))
    fa = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.abs(fa - fb).max())


def test_the_blend_ratio_is_drawn_as_the_authors_draw_it() -> None:
    draws = 2000
    base, partner = _images(0)
    mixup = _their_mixup(partner)
    np.random.seed(0)
    random.seed(0)
    theirs = np.array([
        mixup.get_params(_their_labels(base, BASE_BOXES, [0, 2]))["r"] for _ in range(draws)
    ])  # fmt: skip
    rng = np.random.default_rng(0)
    ours = np.array([MixupParams.sample(rng, [0]).ratio for _ in range(draws)])
    # 2,000 a side: the KS statistic's 0.1 % critical value is 1.95 * sqrt(2 / 2000) = 0.062; a
    # Beta(16, 16) or a ratio on the wrong sample shifted by 0.05 lands far past it
    assert _ecdf_distance(ours, theirs) < 0.062
    assert abs(ours.mean() - theirs.mean()) < 0.006  # three standard errors of the difference
    assert abs(ours.std() / theirs.std() - 1) < 0.1
