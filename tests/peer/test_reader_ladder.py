"""Rung h of the ladder, reading: a COCO segment file as the authors' converter writes it
(assumptions D4, D22), the same file through our reader and through Ultralytics' own
`convert_coco`, whose YOLO labels are what their trainer reads (objects of several polygon
rings and run-length masks, a category that no annotation uses, one without an outline); YOLO
label values past [0, 1] where their loader reads them; a segment or pose set read for boxes,
as their loader reads it for a box task; repeated label lines, dropped where theirs drops
them; and images too small to train, skipped where theirs skips them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lucid_train.data import read_coco, read_yolo
from lucid_train.data.classes import annotated_classes, restrict_classes
from lucid_train.data.image_io import too_small
from lucid_train.data.masks import fill_ring
from lucid_train.data.records import DataFormatError

W, H = 96, 64
STRIDE = 4  # the training masks' resolution (both trainers)


def _square(x: int, y: int, side: int) -> list[int]:
    return [x, y, x + side, y, x + side, y + side, x, y + side]


def _rle(mask: np.ndarray) -> dict[str, object]:
    from pycocotools import mask as coco_mask

    rle = coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [H, W], "counts": rle["counts"].decode()}


def test_several_rings_and_rle_masks_read_as_the_authors_converter_writes_them(
    tmp_path: Path,
) -> None:
    from ultralytics.data.converter import convert_coco
    from ultralytics.data.utils import polygon2mask

    blobs = np.zeros((H, W), bool)
    blobs[40:52, 60:70] = True
    blobs[44:60, 76:90] = True
    blobs[46:50, 80:84] = False  # a hole: outer contours fill it on both sides
    rings = [_square(4, 4, 10), [30, 20, 44, 20, 37, 34]]
    anns = [
        {"bbox": [4, 4, 40, 30], "category_id": 1, "segmentation": rings},
        {"bbox": [50, 2, 32, 20], "category_id": 2,
         "segmentation": [_square(50, 2, 8), _square(70, 10, 12), _square(60, 14, 5)]},
        {"bbox": [60, 40, 30, 20], "category_id": 2, "segmentation": _rle(blobs)},
        {"bbox": [20, 44, 12, 10], "category_id": 1},  # no outline: its box is the mask
    ]  # fmt: skip
    doc = {
        "images": [{"id": 1, "file_name": "a.png", "width": W, "height": H}],
        "annotations": [
            {**a, "id": i + 1, "image_id": 1, "iscrowd": 0} for i, a in enumerate(anns)
        ],
        # id 0 without annotations, as an exporter writes the dataset's own name
        "categories": [{"id": 0, "name": "set"}, {"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
    }
    (tmp_path / "images").mkdir()
    Image.new("RGB", (W, H), (90, 90, 90)).save(tmp_path / "images" / "a.png")
    (tmp_path / "ann").mkdir()
    (tmp_path / "ann" / "instances_train.json").write_text(json.dumps(doc))

    convert_coco(str(tmp_path / "ann"), str(tmp_path / "yolo"), use_segments=True, cls91to80=False)
    rows = [
        np.array(line.split(), np.float64)
        for line in (tmp_path / "yolo" / "labels" / "train" / "a.txt").read_text().splitlines()
    ]
    ann = tmp_path / "ann" / "instances_train.json"
    index = read_coco(ann, tmp_path / "images", task="segment")
    kept = annotated_classes([index])
    assert kept == (1, 2)
    index = restrict_classes(index, kept)
    targets = index.records[0].targets
    assert targets.polygons is not None and len(rows) == len(targets) == 4

    for i, row in enumerate(rows):
        # their class is category_id - 1: with the empty id 0 left out, the same indices
        assert int(row[0]) == int(targets.labels[i])
        theirs = row[1:].reshape(-1, 2) * (W, H)
        ours = targets.polygons[i].astype(np.float64)
        their_cells = polygon2mask((H, W), [theirs.ravel()], 1, STRIDE).astype(bool)
        grid = np.zeros((H // STRIDE, W // STRIDE), np.int16)
        fill_ring(grid, ours, 1, STRIDE)
        our_cells = grid.astype(bool)
        if i != 2:  # polygon rings or the box: the same extent; cells apart where bridges run
            np.testing.assert_allclose(theirs.min(0), ours.min(0), atol=1e-3)
            np.testing.assert_allclose(theirs.max(0), ours.max(0), atol=1e-3)
            assert (our_cells != their_cells).sum() <= 2, i
        else:  # RLE: ours along pixel edges (the COCO bbox), theirs through the edge pixels
            np.testing.assert_allclose(ours.min(0), [60, 40])
            np.testing.assert_allclose(ours.max(0), [90, 60])
            np.testing.assert_allclose(theirs.min(0), [60, 40], atol=1e-3)
            np.testing.assert_allclose(theirs.max(0), [89, 59], atol=1e-3)
            assert (our_cells >= their_cells).all()  # and more on its far edges (D4)


def test_yolo_values_past_the_unit_range_are_read_where_the_authors_loader_reads_them(
    tmp_path: Path,
) -> None:
    """A label line a hair outside [0, 1] (an exporter's rounding) is read by both loaders, ours
    clipping and counting it; one further out is refused by ours and dropped as corrupt by
    theirs (8.4.190 `verify_image_label`), so neither trains it as written."""
    from ultralytics.data.utils import verify_image_label

    for case, (line, readable) in enumerate(
        (
            ("0 1.004 0.5 0.02 0.1", True),
            ("0 0.5 -0.004 0.2 0.02", True),
            ("0 1.02 0.5 0.02 0.1", False),
            ("0 0.5 -0.02 0.2 0.1", False),
        )
    ):
        root = tmp_path / str(case)
        (root / "images" / "train").mkdir(parents=True)
        (root / "labels" / "train").mkdir(parents=True)
        image = root / "images" / "train" / "a.jpg"
        Image.new("RGB", (W, H), (90, 90, 90)).save(image)
        label = root / "labels" / "train" / "a.txt"
        label.write_text(line + "\n")
        (root / "data.yaml").write_text("path: .\ntrain: images/train\nnames: [a]\n")
        theirs = verify_image_label((str(image), str(label), "", False, 1, 0, 0, False))
        assert (theirs[8] == 0) is readable, (line, theirs[-1])  # their corrupt count
        if readable:
            index = read_yolo(root / "data.yaml", "train", task="detect")
            assert len(index.records[0].targets) == 1, line
            assert sum(index.report.counts.values()) == 1
        else:
            with pytest.raises(DataFormatError, match=r"by more than 0\.01"):
                read_yolo(root / "data.yaml", "train", task="detect")


def _one_image_set(
    root: Path, lines: list[str], yaml_extra: str, size: tuple[int, int] = (W, H)
) -> tuple[Path, Path]:
    """A YOLO set of one grey image of ``size`` whose label file holds ``lines``, classes ``a``
    and ``b`` (``yaml_extra`` appended to its data.yaml); the image's and the label file's
    paths."""
    (root / "images" / "train").mkdir(parents=True)
    (root / "labels" / "train").mkdir(parents=True)
    image = root / "images" / "train" / "a.png"
    Image.new("RGB", size, (90, 90, 90)).save(image)
    label = root / "labels" / "train" / "a.txt"
    label.write_text("\n".join(lines) + "\n")
    (root / "data.yaml").write_text(f"path: .\ntrain: images/train\nnames: [a, b]\n{yaml_extra}")
    return image, label


@pytest.mark.parametrize(
    ("kind", "lines", "nkpt"),
    [
        ("segment", ["0 0.1 0.2 0.3 0.2 0.3 0.6", "1 0.5 0.1 0.9 0.3 0.7 0.8 0.55 0.6"], 0),
        ("pose", ["1 0.5 0.5 0.2 0.4 0.5 0.4 2 0.9 0.9 0", "0 0.3 0.6 0.1 0.2 0 0 0 0.3 0.6 1"], 2),
    ],
)
def test_a_detect_read_of_a_segment_or_pose_set_keeps_the_authors_boxes(
    tmp_path: Path, kind: str, lines: list[str], nkpt: int
) -> None:
    """Their `verify_image_label` for a box task (`keypoint=False`): a polygon line becomes its
    enclosing box, a pose line its first five values; ours through `read_yolo(task="detect")`."""
    from ultralytics.data.utils import verify_image_label

    extra = f"kpt_shape: [{nkpt}, 3]\n" if nkpt else ""
    image, label = _one_image_set(tmp_path, lines, extra)
    theirs = verify_image_label((str(image), str(label), "", False, 2, nkpt, 3, False))
    assert theirs[-1] == "", theirs[-1]  # their loader kept the file
    lb = np.asarray(theirs[1], np.float64)  # (N, 5): class, normalised cx cy w h
    t = read_yolo(tmp_path / "data.yaml", "train", task="detect").records[0].targets
    ours_xywh = np.concatenate(
        [(t.boxes[:, :2] + t.boxes[:, 2:]) / 2, t.boxes[:, 2:] - t.boxes[:, :2]], 1
    ) / np.array([W, H, W, H])
    order = np.lexsort(lb.T[::-1])  # theirs come back sorted by their duplicate check
    ours = np.concatenate([t.labels[:, None], ours_xywh], 1)
    np.testing.assert_allclose(ours[np.lexsort(ours.T[::-1])], lb[order], atol=1e-6)


@pytest.mark.parametrize(
    ("task", "lines", "nkpt"),
    [
        ("detect", ["0 0.5 0.5 0.2 0.2"] * 3 + ["1 0.5 0.5 0.2 0.2", "0 0.5 0.5 0.2 0.3"], 0),
        ("pose", ["0 .5 .5 .2 .2 .5 .5 2 .4 .4 1"] * 2 + ["0 .5 .5 .2 .2 0 0 0 .4 .4 1"], 2),
        ("segment", ["0 .1 .1 .5 .1 .5 .5", "0 .1 .1 .5 .5 .1 .5", "0 .1 .1 .5 .1 .5 .5"], 0),
        ("obb", ["0 .1 .1 .2 .1 .2 .2 .1 .2", "0 .2 .2 .1 .2 .1 .1 .2 .1"] * 2, 0),
    ],
)  # fmt: skip
def test_repeated_label_lines_are_dropped_where_the_authors_loader_drops_them(
    tmp_path: Path, task: str, lines: list[str], nkpt: int
) -> None:
    """Their `verify_image_label` removes repeated rows (a polygon, which an obb row is to it,
    only when its class and every point repeat: another ring of the same box is kept); ours
    keeps the same count."""
    from ultralytics.data.utils import verify_image_label

    extra = f"kpt_shape: [{nkpt}, 3]\nflip_idx: [1, 0]\n" if nkpt else ""
    image, label = _one_image_set(tmp_path, lines, extra)
    theirs = verify_image_label((str(image), str(label), "", bool(nkpt), 2, nkpt, 3, False))
    assert theirs[-1].endswith("duplicate labels removed"), theirs[-1]
    index = read_yolo(tmp_path / "data.yaml", "train", task=task)  # type: ignore[arg-type]
    assert len(index.records[0].targets) == len(theirs[1]) < len(lines)


@pytest.mark.parametrize("size", [(1, 1), (9, 64), (64, 9), (10, 10), (10, 64)])
def test_images_under_ten_pixels_a_side_are_skipped_where_the_authors_loader_skips_them(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """Their `verify_image_label` counts an image with a side under 10 px as corrupt and drops
    it with its labels; ours skips and counts it, so both fit the same images."""
    from ultralytics.data.utils import verify_image_label

    image, label = _one_image_set(tmp_path, ["0 0.5 0.5 0.5 0.5"], "", size)
    theirs = verify_image_label((str(image), str(label), "", False, 2, 0, 0, False))
    dropped = theirs[8] == 1  # their corrupt count
    index = read_yolo(tmp_path / "data.yaml", "train", task="detect")
    assert (len(index.records) == 0) is dropped, (size, theirs[-1])
    assert dropped is (min(size) < 10)
    if dropped:
        assert index.report.counts == {too_small(*size): 1}
