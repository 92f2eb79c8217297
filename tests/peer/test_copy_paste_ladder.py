"""Copy-paste in flip mode against the authors' (rung f): the same segment targets through our
`CopyPasteParams.sample` / `apply_copy_paste` and through their 8.4.190 `CopyPaste` (computed at
test time) choose the same instances in the same order (eligible where a mirrored box covers
under 30 % of every existing box's area; the least-overlapping first), append the same mirrored
targets, and paste the mirrored pixels inside the same outlines (ours rasterised by Pillow at
sub-pixel precision, theirs by OpenCV on outlines truncated to whole pixels)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from lucid_train.data.augment import CopyPasteParams, apply_copy_paste
from lucid_train.data.targets import Targets

W, H = 160, 96


def _box_ring(x1: float, y1: float, x2: float, y2: float) -> np.ndarray:
    """An 8-point outline of a box (their instances need outlines of one length)."""
    xm, ym = (x1 + x2) / 2, (y1 + y2) / 2
    xs, ys = [x1, xm, x2, x2, x2, xm, x1, x1], [y1, y1, y1, ym, y2, y2, y2, ym]
    return np.stack([xs, ys], -1).astype(np.float32)


# x1, y1, x2, y2: a large object whose mirror would cover a small one (covered: not eligible,
# though it covers little of its own area), a small one whose mirror falls inside a large one
# (eligible: it covers little of the large box), and free objects overlapping their mirrors'
# neighbours by different amounts, so the order decides which are pasted
OBJECTS = [
    (10.0, 10.0, 60.0, 60.0),  # mirror 100-150: covers the small one below
    (120.0, 30.0, 130.0, 40.0),  # small, covered by the first's mirror
    (70.5, 70.0, 75.5, 80.0),  # small: mirror 84.5-89.5, inside the wide box below
    (80.0, 62.0, 150.0, 94.0),  # wide: its mirror 10-80 overlaps the first box partly
    (2.0, 70.0, 12.0, 90.0),  # free: mirror 148-158, a little of the wide box
    (30.0, 64.0, 40.0, 74.0),  # free: mirror 120-130, inside the wide box's band
    (2.0, 2.0, 8.0, 8.0),  # two whose mirrors touch nothing: a tie at 0, which the order breaks
    (62.0, 2.0, 66.0, 6.0),
]


def _scene() -> tuple[np.ndarray, Targets]:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    boxes = np.array(OBJECTS, np.float32)
    rings = tuple(_box_ring(*b) for b in OBJECTS)
    return image, Targets(boxes, np.arange(len(OBJECTS), dtype=np.int64), polygons=rings)


def _theirs(image: np.ndarray, targets: Targets, p: float) -> tuple[dict, np.ndarray]:
    from ultralytics.data.augment import CopyPaste
    from ultralytics.utils.instance import Instances

    assert targets.polygons is not None
    instances = Instances(
        targets.boxes.copy(), segments=np.stack(targets.polygons).copy(), bbox_format="xyxy",
        normalized=False,
    )  # fmt: skip
    labels = {"img": image.copy(), "instances": instances,
              "cls": targets.labels.astype(np.float32)[:, None]}  # fmt: skip
    transform = CopyPaste(p=p, mode="flip")
    params = transform.get_params(labels)
    out = transform.apply_instances(transform.apply_image(labels, params), params)
    return out, np.asarray(params["selected"])


@pytest.mark.parametrize("p", [0.3, 0.5, 1.0])
def test_our_copy_paste_chooses_and_pastes_as_the_authors(p: float) -> None:
    image, targets = _scene()
    theirs, selected = _theirs(image, targets, p)
    params = CopyPasteParams.sample(targets, W, p)
    assert list(params.chosen) == selected.tolist()
    assert len(params.chosen) >= 1
    out, pasted = apply_copy_paste(Image.fromarray(image), targets, params)
    their = theirs["instances"]
    their.convert_bbox(format="xyxy")
    np.testing.assert_allclose(pasted.boxes, their.bboxes, atol=1e-4)
    np.testing.assert_array_equal(pasted.labels, theirs["cls"].ravel().astype(np.int64))
    # the pasted pixels: both take the mirrored image inside the chosen outlines
    mirrored = image[:, ::-1]
    ours_in = (np.asarray(out) == mirrored).all(-1) & ~(image == mirrored).all(-1)
    theirs_in = (theirs["img"] == mirrored).all(-1) & ~(image == mirrored).all(-1)
    overlap = (ours_in & theirs_in).sum() / max(1, (ours_in | theirs_in).sum())
    assert overlap > 0.85, overlap  # outline edges: whole-pixel truncation against sub-pixel


def test_a_mirror_covering_a_small_object_is_not_pasted_one_inside_a_large_box_is() -> None:
    _, targets = _scene()
    chosen = set(CopyPasteParams.sample(targets, W, 1.0).chosen)
    assert 0 not in chosen and 2 in chosen
