"""The load-time resize against the authors' (D24, rung f): their ``load_image`` enlarges or
shrinks a source to the long side with OpenCV's ``INTER_LINEAR``, computed here at test time on
the same pixels; ours (`load_resized`) lands every pixel within a level of theirs, and an
enlargement (Pillow's separable resize) equal to theirs on most pixels."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from lucid_train.data.dataset import load_resized, load_size
from lucid_train.data.targets import Targets

cv2 = pytest.importorskip("cv2", reason="OpenCV comes with the peer group's Ultralytics")


def _photo(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    ramp = np.stack([xx * 0.3, yy * 0.4, (xx + yy) * 0.2], -1) + rng.normal(
        0, 25, (height, width, 3)
    )
    rgb = np.clip(ramp + 40, 0, 255).astype(np.uint8)
    rgb[height // 4 : height // 2, width // 3 : width // 2] = (200, 40, 90)  # hard edges
    return rgb


@pytest.mark.parametrize(("height", "width", "size", "equal_at_least"), [
    (480, 600, 640, 0.72),  # enlarged
    (517, 389, 640, 0.72),
    (480, 640, 320, 0.5),  # shrunk: the affine's truncation, within a level
])  # fmt: skip
def test_the_load_resize_lands_within_a_level_of_the_authors(
    height: int, width: int, size: int, equal_at_least: float
) -> None:
    rgb = _photo(height, width, seed=height)
    empty = Targets(boxes=np.zeros((0, 4), np.float32), labels=np.zeros(0, np.int64))
    ours = np.asarray(load_resized(Image.fromarray(rgb), empty, size)[0]).astype(int)
    h, w = load_size(height, width, size)
    cv2.setNumThreads(0)
    theirs = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_LINEAR).astype(int)
    assert ours.shape == theirs.shape == (h, w, 3)
    differ = np.abs(ours - theirs)
    assert differ.max() <= 1
    assert (differ == 0).mean() >= equal_at_least, (differ == 0).mean()
