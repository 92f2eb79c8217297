"""Reading, EXIF orientation: each of the eight tags through their 8.4.190 `imread` (OpenCV's,
which turns the pixels upright) and `exif_size` (the size their label check reads) against our
`open_rgb` and header check, and a YOLO label of the upright image read by ours onto the same
pixels their loader trains on (assumptions.md D9)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lucid_train.data import read_yolo
from lucid_train.data.image_io import check_image, open_rgb

STORED = (np.arange(24 * 40 * 3, dtype=np.int64).reshape(24, 40, 3) * 37 % 251).astype(np.uint8)


@pytest.mark.parametrize("tag", range(1, 9))
def test_each_orientation_reads_the_pixels_and_size_their_loader_reads(
    tmp_path: Path, tag: int
) -> None:
    from ultralytics.data.utils import exif_size
    from ultralytics.utils.patches import imread

    exif = Image.Exif()
    exif[0x0112] = tag
    path = tmp_path / "images" / "train" / "a.png"  # lossless: the same pixels, not near ones
    path.parent.mkdir(parents=True)
    Image.fromarray(STORED).save(path, exif=exif)
    theirs = imread(str(path))[..., ::-1]  # BGR -> RGB
    ours = np.asarray(open_rgb(path))
    assert ours.shape == theirs.shape and np.array_equal(ours, theirs)
    with Image.open(path) as im:
        assert check_image(path, "header") == tuple(exif_size(im))

    # a label drawn on the upright image (normalised xywh, as every labelling tool shows it)
    (tmp_path / "labels" / "train").mkdir(parents=True)
    (tmp_path / "labels" / "train" / "a.txt").write_text("0 0.5 0.25 0.5 0.25\n")
    (tmp_path / "data.yaml").write_text("path: .\ntrain: images/train\nnames:\n  0: thing\n")
    box = read_yolo(tmp_path / "data.yaml", "train", task="detect").records[0].targets.boxes[0]
    h, w = theirs.shape[:2]  # their loader denormalises by the upright image's size
    np.testing.assert_allclose(box, [0.25 * w, 0.125 * h, 0.75 * w, 0.375 * h], rtol=1e-6)
