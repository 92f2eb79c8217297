"""The COCO reader maps boxes, rings, rotated rings and keypoints into `Targets`, refuses broken
files with the file and the fix, and counts every skip."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pycocotools.mask as mask_utils
import pytest

from lucid_train.data.dataset import EvalDataset
from lucid_train.data.formats import coco
from lucid_train.data.formats.coco import clip_box, flip_index_from_names, read_coco
from lucid_train.data.formats.coco_documents import coco_document, scored_ground_truth
from lucid_train.data.image_io import CorruptImageError
from lucid_train.data.records import DataFormatError
from lucid_train.evaluation import coco_from_dict, run_cocoeval

Writer = Callable[[Path, dict[str, Any]], Path]


def _doc(anns: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    doc = {
        "images": [{"id": 7, "file_name": "a.png", "width": 64, "height": 48}],
        "annotations": anns,
        "categories": [{"id": 3, "name": "cat"}, {"id": 1, "name": "dog"}],
    }
    doc.update(extra)
    return doc


@pytest.fixture
def write_doc(write_image: Callable[..., Path]) -> Callable[[Path, dict[str, Any]], Path]:
    def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
        write_image(tmp_path / "img" / "a.png")
        (tmp_path / "ann.json").write_text(json.dumps(doc))
        return tmp_path / "ann.json"

    return write


def _ann(i: int, cat: int = 3, **kw: Any) -> dict[str, Any]:
    return {"id": i, "image_id": 7, "category_id": cat, "bbox": [10, 5, 20, 10], "iscrowd": 0, **kw}


def test_boxes_are_xyxy_clipped_and_labels_follow_sorted_category_ids(
    tmp_path: Path, write_doc: Writer
) -> None:
    """bbox xywh → xyxy clipped to the image; label 0 is the smallest category id."""
    ann = write_doc(tmp_path, _doc([_ann(1, cat=1), {**_ann(2), "bbox": [50, 40, 30, 30]}]))
    index = read_coco(ann, tmp_path / "img", task="detect")
    t = index.records[0].targets
    assert index.schema.category_ids == (1, 3)
    assert index.schema.class_names == ("dog", "cat")
    np.testing.assert_allclose(t.boxes, [[10, 5, 30, 15], [50, 40, 64, 48]])
    assert t.labels.tolist() == [0, 1]
    assert index.records[0].image_id == 7


def test_crowd_regions_and_short_rings_are_counted_not_silently_dropped(
    tmp_path: Path, write_doc: Writer
) -> None:
    """iscrowd is skipped and counted; an object without a usable polygon (a 2-point ring, no
    segmentation) keeps its box as its mask, counted, as the authors' converter writes a
    box-shaped polygon for it (assumptions D4)."""
    ring = [10, 5, 30, 5, 30, 15, 10, 15]
    anns = [
        _ann(1, segmentation=[ring]),
        _ann(2, segmentation=[ring], iscrowd=1),
        _ann(3, segmentation=[[1, 1, 2, 2]], bbox=[40, 20, 10, 8]),
        _ann(4),
    ]
    index = read_coco(write_doc(tmp_path, _doc(anns)), tmp_path / "img", task="segment")
    targets = index.records[0].targets
    assert len(targets) == 3 and targets.polygons is not None
    np.testing.assert_allclose(targets.polygons[1], [[40, 20], [50, 20], [50, 28], [40, 28]])
    np.testing.assert_allclose(targets.polygons[2], [[10, 5], [30, 5], [30, 15], [10, 15]])
    assert index.report.counts == {
        "crowd region (scored by evaluation, not trained on)": 1,
        "polygon with fewer than 3 points: kept, its box as the mask": 1,
        "no segmentation: kept, its box as the mask": 1,
    }
    assert "annotation 3" in index.report.summary()


def test_an_objects_polygon_parts_are_joined_into_one_ring_with_their_extent(
    tmp_path: Path, write_doc: Writer
) -> None:
    """Segment: every ring of an annotation is a part of the object (the authors' converter joins
    them too); the joined ring fills what the parts fill, spans their extent (training boxes come
    from it), and a broken part is dropped and counted while the rest is kept."""
    from lucid_train.data.masks import fill_ring
    from lucid_train.data.polygons import polygon_area

    left = [4, 4, 20, 4, 20, 20, 4, 20]
    right = [40, 30, 40, 44, 60, 44, 60, 30]  # the other winding
    anns = [
        _ann(1, bbox=[4, 4, 56, 40], segmentation=[left, right]),
        _ann(2, bbox=[4, 4, 16, 16], segmentation=[left, [1, 1, 2, 2]]),
    ]
    index = read_coco(write_doc(tmp_path, _doc(anns)), tmp_path / "img", task="segment")
    joined, kept = index.records[0].targets.polygons or ()
    np.testing.assert_allclose([*joined.min(0), *joined.max(0)], [4, 4, 60, 44])
    parts = [np.reshape(r, (-1, 2)).astype(np.float64) for r in (left, right)]
    assert polygon_area(joined) == pytest.approx(sum(polygon_area(r) for r in parts))
    one, each = np.zeros((12, 16), np.int16), np.zeros((12, 16), np.int16)
    fill_ring(one, joined.astype(np.float64), 1, 4)
    for r in parts:
        fill_ring(each, r, 1, 4)
    assert one.sum() > 0 and (one == each).all()
    np.testing.assert_allclose(kept, parts[0])
    assert index.report.counts == {
        "polygon part with an odd count or < 3 points (the rest kept)": 1
    }


def test_four_point_rings_become_rotated_boxes_for_obb(tmp_path: Path, write_doc: Writer) -> None:
    """A 4-point ring is fitted to a long-edge rotated box; boxes become its envelope."""
    c, s = math.cos(0.4), math.sin(0.4)
    u, v = np.array([c, s]) * 10, np.array([-s, c]) * 4
    centre = np.array([30, 24])
    ring = np.stack([centre - u - v, centre + u - v, centre + u + v, centre - u + v])
    ann = write_doc(tmp_path, _doc([_ann(1, segmentation=[ring.reshape(-1).tolist()])]))
    t = read_coco(ann, tmp_path / "img", task="obb").records[0].targets
    assert t.rboxes is not None
    np.testing.assert_allclose(t.rboxes, [[30, 24, 20, 8, 0.4]], atol=1e-4)
    np.testing.assert_allclose(t.boxes[0, :2], ring.min(0), atol=1e-4)


def test_keypoints_and_flip_pairs_come_from_the_category(tmp_path: Path, write_doc: Writer) -> None:
    """Keypoints (x, y, v) → (N, K, 2) + visibility; left/right names pair up for flips."""
    names = ["nose", "left_eye", "right_eye"]
    cats = [{"id": 1, "name": "person", "keypoints": names, "skeleton": [[1, 2]]}]
    ann = write_doc(
        tmp_path, _doc([_ann(1, cat=1, keypoints=[5, 6, 2, 7, 8, 1, 0, 0, 0])], categories=cats)
    )
    index = read_coco(ann, tmp_path / "img", task="pose")
    t = index.records[0].targets
    assert t.keypoints is not None
    assert t.keypoint_vis is not None
    np.testing.assert_allclose(t.keypoints[0], [[5, 6], [7, 8], [0, 0]])
    assert t.keypoint_vis[0].tolist() == [2, 1, 0]
    assert index.schema.flip_index == (0, 2, 1)
    assert index.schema.skeleton == ((0, 1),)
    assert flip_index_from_names(["Left_Hand", "right_hand", "hip"]) == (1, 0, 2)


def test_wrong_keypoint_count_names_the_annotation(tmp_path: Path, write_doc: Writer) -> None:
    """A keypoint list that does not match the category's K is an error naming the annotation."""
    cats = [{"id": 1, "name": "p", "keypoints": ["a", "b"]}]
    ann = write_doc(tmp_path, _doc([_ann(9, cat=1, keypoints=[1, 2, 2])], categories=cats))
    with pytest.raises(DataFormatError, match=r"annotation 9: expected 6 keypoint values"):
        read_coco(ann, tmp_path / "img", task="pose")


def test_duplicate_image_ids_are_refused(tmp_path: Path, write_doc: Writer) -> None:
    """Two images with one id: an error naming the id, both files and the fix."""
    doc = _doc([])
    doc["images"].append({"id": 7, "file_name": "b.png", "width": 64, "height": 48})
    with pytest.raises(
        DataFormatError, match=r"duplicate image id 7 \(a.png and b.png\); give every image"
    ):
        read_coco(write_doc(tmp_path, doc), tmp_path / "img", task="detect")


def test_duplicate_annotation_ids_are_refused(tmp_path: Path, write_doc: Writer) -> None:
    """Two annotations with one id (pycocotools would keep one): an error naming the id."""
    with pytest.raises(
        DataFormatError, match=r"duplicate annotation id 3 .*give every annotation a unique id"
    ):
        read_coco(write_doc(tmp_path, _doc([_ann(3), _ann(3)])), tmp_path / "img", task="detect")


def test_category_id_not_in_categories_is_refused(tmp_path: Path, write_doc: Writer) -> None:
    """An annotation with an undeclared category id names the annotation, the id and the fix."""
    with pytest.raises(
        DataFormatError, match=r"annotation 4 has category_id 99.*add the category or fix the id"
    ):
        read_coco(write_doc(tmp_path, _doc([_ann(4, cat=99)])), tmp_path / "img", task="detect")


@pytest.mark.parametrize("name", [None, "", "  ", "missing"])
def test_a_category_without_a_name_is_named_by_its_id_and_counted(
    tmp_path: Path, write_doc: Writer, name: str | None
) -> None:
    """A null name trained as the class 'None', unsaid; now each such category takes its id
    as its name and the load report says so."""
    cats = [{"id": 3, "name": "cat"}, {"id": 1} if name == "missing" else {"id": 1, "name": name}]
    ann = write_doc(tmp_path, _doc([_ann(1, cat=1)], categories=cats))
    index = read_coco(ann, tmp_path / "img", task="detect")
    assert index.schema.class_names == ("1", "cat")
    assert index.report.counts == {coco.UNNAMED: 1}
    assert index.report.examples[coco.UNNAMED] == ["category id 1"]


def test_annotation_of_unknown_image_is_refused(tmp_path: Path, write_doc: Writer) -> None:
    """An annotation pointing at no image is an error."""
    with pytest.raises(DataFormatError, match="image_id 8, which is not in 'images'"):
        read_coco(
            write_doc(tmp_path, _doc([{**_ann(1), "image_id": 8}])), tmp_path / "img", task="detect"
        )


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_truncated_image_is_a_counted_skip_with_full_verification(
    tmp_path: Path, write_doc: Writer
) -> None:
    """verify='full' decodes every image: a truncated one is skipped and counted."""
    ann = write_doc(tmp_path, _doc([_ann(1)]))
    noisy = np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    from PIL import Image

    Image.fromarray(noisy).save(tmp_path / "img" / "a.png")
    _truncate(tmp_path / "img" / "a.png")
    index = read_coco(ann, tmp_path / "img", task="detect", verify="full")
    assert len(index) == 0
    assert index.report.counts == {"corrupt or truncated image": 1}


def test_corrupt_image_found_at_decode_names_the_file_and_the_fix(
    tmp_path: Path, write_doc: Writer
) -> None:
    """With the cheap header check, a corrupt body (the file whole in length, its end intact)
    surfaces at decode as a clear error naming the flag that finds it at load."""
    ann = write_doc(tmp_path, _doc([_ann(1)]))
    from PIL import Image

    noisy = np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    path = tmp_path / "img" / "a.png"
    Image.fromarray(noisy).save(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # inside the pixel data
    path.write_bytes(bytes(data))
    index = read_coco(ann, tmp_path / "img", task="detect", verify="header")
    with pytest.raises(CorruptImageError, match=r"a.png: cannot decode image.*--data.verify full"):
        EvalDataset(index.records, index.schema, 64)[0]


def test_missing_and_garbage_image_files_are_counted(tmp_path: Path, write_doc: Writer) -> None:
    """A missing file and a non-image file are skipped and counted under their own reasons."""
    doc = _doc([])
    doc["images"] += [
        {"id": 8, "file_name": "gone.png", "width": 64, "height": 48},
        {"id": 9, "file_name": "junk.png", "width": 64, "height": 48},
    ]
    ann = write_doc(tmp_path, doc)
    (tmp_path / "img" / "junk.png").write_bytes(b"not an image")
    index = read_coco(ann, tmp_path / "img", task="detect")
    assert [r.image_id for r in index.records] == [7]
    assert index.report.counts == {"missing image file": 1, "corrupt or truncated image": 1}


def test_declared_size_mismatch_is_refused(tmp_path: Path, write_doc: Writer) -> None:
    """A JSON width/height that differs from the file is an error naming both sizes."""
    doc = _doc([])
    doc["images"][0]["width"] = 100
    with pytest.raises(DataFormatError, match="declared 100x48 but the file is 64x48"):
        read_coco(write_doc(tmp_path, doc), tmp_path / "img", task="detect")


def test_coco_document_round_trips_through_the_reader(tmp_path: Path, write_doc: Writer) -> None:
    """coco_document(read_coco(x)) read again gives equal targets (segment)."""
    ring = [10, 5, 30, 5, 30, 15, 10, 15]
    ann = write_doc(tmp_path, _doc([_ann(1, segmentation=[ring])]))
    index = read_coco(ann, tmp_path / "img", task="segment")
    (tmp_path / "again.json").write_text(
        json.dumps(coco_document(index, images_dir=tmp_path / "img"))
    )
    again = read_coco(tmp_path / "again.json", tmp_path / "img", task="segment")
    assert again.records[0].targets.allclose(index.records[0].targets)


def _inside(rings: list[np.ndarray], height: int, width: int) -> np.ndarray:
    """The pixels whose centre lies inside any of ``rings`` (even-odd ray casting)."""
    yy, xx = np.mgrid[0:height, 0:width] + 0.5
    out = np.zeros((height, width), bool)
    for ring in rings:
        inside = np.zeros((height, width), bool)
        for (x0, y0), (x1, y1) in zip(ring, np.roll(ring, -1, 0), strict=True):
            if y0 == y1:
                continue
            crosses = (yy >= min(y0, y1)) & (yy < max(y0, y1))
            inside ^= crosses & (xx < x0 + (yy - y0) * (x1 - x0) / (y1 - y0))
        out |= inside
    return out


def test_rle_masks_are_traced_to_rings_that_hold_exactly_their_pixels(
    tmp_path: Path, write_doc: Writer
) -> None:
    """Segment: a run-length mask (compressed or not) becomes the outer boundary of each of its
    parts along pixel edges, joined into one ring: the same pixels (holes filled, as the authors'
    converter keeps outer contours), the mask's extent; one that is not its image's keeps its box
    as the mask, counted."""
    from pycocotools import mask as coco_mask

    from lucid_train.data.mask_rings import RleError, rle_rings

    rng = np.random.default_rng(0)
    for _ in range(100):  # our decoder of the compressed counts against pycocotools' encoder
        h, w = (int(v) for v in rng.integers(1, 40, 2))
        noise = (rng.random((h, w)) > rng.random()).astype(np.uint8)
        text = coco_mask.encode(np.asfortranarray(noise))["counts"].decode()
        rings = rle_rings({"size": [h, w], "counts": text}, h, w)
        assert (_inside(rings, h, w) >= noise.astype(bool)).all()
    # counts that would overrun the declared image are refused before anything is expanded
    big = coco_mask.encode(np.asfortranarray(np.ones((48, 64), np.uint8)))["counts"].decode()
    with pytest.raises(RleError, match="do not cover"):
        rle_rings({"size": [24, 32], "counts": big}, 24, 32)
    for _ in range(50):  # rectangles that overlap, touch at corners or stand apart
        m = np.zeros((48, 64), np.uint8)
        for _ in range(int(rng.integers(1, 4))):
            y, x = rng.integers(0, 40), rng.integers(0, 56)
            m[y : y + rng.integers(1, 9), x : x + rng.integers(1, 9)] = 1
        rle = coco_mask.encode(np.asfortranarray(m))
        rings = rle_rings({"size": [48, 64], "counts": rle["counts"].decode()}, 48, 64)
        assert (_inside(rings, 48, 64) == m.astype(bool)).all()
    ring_mask = np.zeros((48, 64), np.uint8)
    ring_mask[10:20, 10:30] = 1
    ring_mask[13:17, 15:25] = 0  # a hole
    flat = ring_mask.ravel(order="F")
    edges = np.flatnonzero(np.diff(flat)) + 1
    counts = np.diff(np.concatenate([[0], edges, [flat.size]])).tolist()  # starts with zeros
    anns = [
        _ann(1, bbox=[10, 10, 20, 10], segmentation={"size": [48, 64], "counts": counts}),
        _ann(2, segmentation={"size": [24, 32], "counts": [768]}),
        _ann(3, segmentation={"size": [48, 64], "counts": "not an rle"}),
    ]
    index = read_coco(write_doc(tmp_path, _doc(anns)), tmp_path / "img", task="segment")
    ring, *unread = index.records[0].targets.polygons or ()
    filled = np.zeros((48, 64), bool)
    filled[10:20, 10:30] = True
    assert (_inside([ring.astype(np.float64)], 48, 64) == filled).all()
    np.testing.assert_allclose([*ring.min(0), *ring.max(0)], [10, 10, 30, 20])
    # as the authors' converter: an RLE it cannot use leaves the box as the mask, counted
    assert len(unread) == 2
    np.testing.assert_allclose(unread[0], [[10, 5], [30, 5], [30, 15], [10, 15]])
    assert index.report.counts == {
        "RLE mask that does not read as its image's: kept, its box as the mask": 2
    }


def test_clip_box_is_the_boxs_intersection_with_the_image_or_none() -> None:
    """Random boxes inside, across and outside a 64 x 48 image, huge ones (a sum past float64)
    and zero-area ones: the clipped corners equal numpy's clip of them, and None is returned
    exactly where nothing of the box is left."""
    rng = np.random.default_rng(0)
    cases = [list(v) for v in rng.uniform(-80, 120, (2000, 4)) * [1, 1, 0.6, 0.6]]
    cases += [[0, 0, 64, 48], [10, 10, 0, 5], [-5, -5, 5, 5], [1e308, 0, 1e308, 4],
              [-1e308, -1e308, 1e308, 1e308], [63.5, 47.5, 10, 10], [64, 0, 3, 3]]  # fmt: skip
    for x, y, w, h in cases:
        with np.errstate(over="ignore"):
            ref = np.array([x, y, x + w, y + h], np.float64)
        ref[[0, 2]] = ref[[0, 2]].clip(0, 64)
        ref[[1, 3]] = ref[[1, 3]].clip(0, 48)
        got = clip_box([x, y, w, h], 64, 48)
        if ref[2] <= ref[0] or ref[3] <= ref[1]:
            assert got is None, (x, y, w, h)
        else:
            assert got is not None and got.dtype == np.float64
            np.testing.assert_array_equal(got, ref)


def test_a_file_of_normalised_boxes_is_refused_with_the_fix(
    tmp_path: Path, write_doc: Writer
) -> None:
    """Every 'bbox' inside the unit square on a 64x48 image: written normalised, refused with
    the file and how to convert; one box past 1 px is read as pixels."""
    unit = [{**_ann(1), "bbox": [0.1, 0.2, 0.3, 0.25]}, {**_ann(2), "bbox": [0.5, 0.5, 0.4, 0.4]}]
    ann = write_doc(tmp_path, _doc(unit))
    refusal = r"ann.json: all 2 boxes lie within \[0, 1\] px .*multiply x and width"
    with pytest.raises(DataFormatError, match=refusal):
        read_coco(ann, tmp_path / "img", task="detect")
    ann = write_doc(tmp_path, _doc([*unit, _ann(3)]))
    assert len(read_coco(ann, tmp_path / "img", task="detect").records[0].targets.boxes) == 3


def test_a_turned_image_declared_at_its_stored_size_is_refused_naming_the_tag(
    tmp_path: Path, write_doc: Writer
) -> None:
    """The file's EXIF tag turns its 64x48 stored pixels to 48x64 (read upright, as the
    authors' loader reads it); a JSON declaring 64x48 drew on the stored pixels or is wrong:
    refused with both sizes and the tag."""
    from PIL import Image

    ann = write_doc(tmp_path, _doc([_ann(1)]))
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(np.zeros((48, 64, 3), np.uint8)).save(tmp_path / "img" / "a.png", exif=exif)
    with pytest.raises(
        DataFormatError,
        match=r"declared 64x48 but the file is 48x64 upright \(its EXIF orientation",
    ):
        read_coco(ann, tmp_path / "img", task="detect")


def test_a_box_clipped_by_more_than_a_pixel_is_counted_and_rounding_is_not(
    tmp_path: Path, write_doc: Writer
) -> None:
    """On a 64x48 image: a box reaching 16 px past the right edge is clipped and counted; one
    past it by half a pixel (an exporter's rounding) is clipped without a word."""
    far = {**_ann(1), "bbox": [50, 10, 30, 20]}
    hair = {**_ann(2), "bbox": [10, 10, 54.5, 20]}
    index = read_coco(write_doc(tmp_path, _doc([far, hair])), tmp_path / "img", task="detect")
    np.testing.assert_allclose(index.records[0].targets.boxes, [[50, 10, 64, 30], [10, 10, 64, 30]])
    assert index.report.counts == {"box more than 1 px outside the image: clipped to it": 1}
    assert index.report.examples[next(iter(index.report.counts))] == [
        f"{tmp_path}/ann.json: annotation 1"
    ]


def test_one_file_under_two_image_ids_is_refused(tmp_path: Path, write_doc: Writer) -> None:
    """The same file_name under ids 7 and 8: it would train and be scored twice, each id with
    only its own annotations; refused naming both ids and the fix."""
    doc = _doc([_ann(1)])
    doc["images"].append({"id": 8, "file_name": "a.png", "width": 64, "height": 48})
    with pytest.raises(DataFormatError, match=r"images 7 and 8 both name 'a.png'; list each file"):
        read_coco(write_doc(tmp_path, doc), tmp_path / "img", task="detect")


@pytest.mark.parametrize(
    ("where", "doc"),
    [
        (
            "images[0]: 'id'",
            _doc([], images=[{"id": 2**70, "file_name": "a.png", "width": 64, "height": 48}]),
        ),
        ("annotations[0]: 'id'", _doc([_ann(2**63)])),
        ("annotations[0]: 'image_id'", _doc([{**_ann(1), "image_id": -(2**63) - 1}])),
        ("categories[0]: 'id'", _doc([], categories=[{"id": 2**64, "name": "cat"}])),
    ],
)
def test_a_coco_id_past_int64_is_refused_naming_the_entry(
    tmp_path: Path, write_doc: Writer, where: str, doc: dict[str, Any]
) -> None:
    """JSON integers have no bound, but ids travel as int64 (batches, evaluation): a larger one
    is refused where it is read, naming the entry, not left to crash the run's first batch."""
    with pytest.raises(DataFormatError, match=rf"{re.escape(where)} -?\d+ is past the 64-bit"):
        read_coco(write_doc(tmp_path, doc), tmp_path / "img", task="detect")


def test_a_coco_file_name_written_the_windows_way_is_refused_with_the_fix(
    tmp_path: Path, write_doc: Writer
) -> None:
    """Was: counted as a missing image, so a Windows export lost every image to the count; now
    refused as YOLO image lists refuse such paths. A file whose name holds a backslash is read."""
    doc = _doc([_ann(1)])
    doc["images"][0]["file_name"] = "sub\\a.png"
    refused = r"image 7: 'file_name' 'sub\\\\a.png' names no file.*Windows way.*forward slashes"
    with pytest.raises(DataFormatError, match=refused):
        read_coco(write_doc(tmp_path, doc), tmp_path / "img", task="detect")
    (tmp_path / "img" / "a.png").rename(tmp_path / "img" / "sub\\a.png")
    assert len(read_coco(tmp_path / "ann.json", tmp_path / "img", task="detect")) == 1


def test_a_segment_object_without_a_mask_is_scored_against_the_box_it_trained(
    tmp_path: Path, write_doc: Writer
) -> None:
    """The mask scorer needs a mask for every object: one whose ``segmentation`` is missing,
    empty or under 3 points, or whose RLE is empty or of another size, gets, in the scored
    document, the box ring the loader trained (assumptions D4) instead of stopping validation
    with the scorer's KeyError or keeping a mask no prediction can match; a usable ring stays
    the file's own."""
    ring = [10, 5, 30, 5, 30, 15, 10, 15]
    anns = [
        _ann(1, segmentation=[ring]),
        _ann(2, bbox=[40, 20, 10, 8]),
        _ann(3, segmentation=[], bbox=[0, 30, 8, 8]),
        _ann(4, segmentation=[[1, 1, 2, 2]], bbox=[20, 30, 6, 6]),
        _ann(5, segmentation={"size": [48, 64], "counts": [48 * 64]}, bbox=[50, 30, 4, 4]),
        _ann(6, segmentation={"size": [48, 63], "counts": [48 * 63]}, bbox=[40, 40, 4, 4]),
    ]
    index = read_coco(write_doc(tmp_path, _doc(anns)), tmp_path / "img", task="segment")
    doc = scored_ground_truth(index)
    segs = [a["segmentation"] for a in doc["annotations"]]
    assert segs[0] == [ring]
    assert segs[1:] == [
        [[40.0, 20.0, 50.0, 20.0, 50.0, 28.0, 40.0, 28.0]],
        [[0.0, 30.0, 8.0, 30.0, 8.0, 38.0, 0.0, 38.0]],
        [[20.0, 30.0, 26.0, 30.0, 26.0, 36.0, 20.0, 36.0]],
        [[50.0, 30.0, 54.0, 30.0, 54.0, 34.0, 50.0, 34.0]],
        [[40.0, 40.0, 44.0, 40.0, 44.0, 44.0, 40.0, 44.0]],
    ]
    dets = [  # each object predicted as its scored ring: a perfect prediction
        {
            "image_id": 7,
            "category_id": a["category_id"],
            "score": 0.9,
            "segmentation": mask_utils.merge(mask_utils.frPyObjects(a["segmentation"], 48, 64)),
        }
        for a in doc["annotations"]
    ]
    stats = run_cocoeval(coco_from_dict(doc), dets, "segm")
    assert stats["mAP50"] == pytest.approx(1.0)
