"""Malformed inputs the readers' fuzz test found escaping as raw exceptions (KeyError, TypeError,
UnicodeDecodeError, `TargetsError` without a file, ...), each kept as a plain case: the reader
refuses it with one `DataFormatError` line naming the file (and line) and the fix. Also the split
with no usable image, refused with the folder and what was looked for."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from lucid_train.data import DataFormatError, EmptySplitError, read_split
from lucid_train.data.formats.input_checks import F32_OVERFLOW, number_list
from lucid_train.data.records import Task


def _png(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((12, 16, 3), 90, np.uint8)).save(path)


def _coco(root: Path, change: Callable[[dict[str, Any]], None], raw: bytes | None = None) -> Path:
    doc: dict[str, Any] = {
        "images": [{"id": 1, "file_name": "a.png", "width": 16, "height": 12}],
        "annotations": [
            {
                "id": 1,
                "image_id": 1,
                "category_id": 1,
                "bbox": [1.0, 1.0, 8.0, 6.0],
                "segmentation": [[1.0, 1.0, 9.0, 1.0, 9.0, 7.0, 1.0, 7.0]],
                "keypoints": [2.0, 2.0, 2, 5.0, 5.0, 1],
            }
        ],
        "categories": [{"id": 1, "name": "cat", "keypoints": ["left_eye", "right_eye"]}],
    }
    change(doc)
    ann = root / "annotations" / "train.json"
    ann.parent.mkdir(parents=True)
    ann.write_bytes(json.dumps(doc).encode() if raw is None else raw)
    _png(root / "images" / "train" / "a.png")
    return ann


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        node[int(last) if last.isdigit() else last] = value

    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        del node[last]

    return change


COCO_CASES: list[tuple[str, Task, Callable[[dict[str, Any]], None], str]] = [
    ("image-not-object", "detect", _set("images.0", 7), r"images\[0\] must be an object"),
    ("image-without-id", "detect", _drop("images.0.id"), r"images\[0\]: missing 'id'"),
    ("category-id-nan", "detect", _set("categories.0.id", math.nan), r"'id' must be an integer"),
    ("image-id-empty", "detect", _set("annotations.0.image_id", ""), r"'image_id' must be an int"),
    ("bbox-nan", "detect", _set("annotations.0.bbox.2", math.nan), r"'bbox' holds a non-finite"),
    # JSON keeps an integer of any length: past float64's range it is refused, not an OverflowError
    ("bbox-int-past-float64", "detect", _set("annotations.0.bbox.0", 10**400), r"out-of-range"),
    ("bbox-string", "detect", _set("annotations.0.bbox", "1 2 3 4"), r"'bbox' must be a list"),
    ("bbox-missing", "detect", _drop("annotations.0.bbox"), r"missing 'bbox'"),
    ("width-none", "detect", _set("images.0.width", None), r"'width' must be a positive integer"),
    ("file-name-number", "detect", _set("images.0.file_name", 3), r"'file_name' must be"),
    ("iscrowd-list", "detect", _set("annotations.0.iscrowd", [1]), r"'iscrowd' must be 0 or 1"),
    ("annotation-not-object", "detect", _set("annotations.0", -75), r"must be an object"),
    (
        "ring-beyond-float32",
        "segment",
        _set("annotations.0.segmentation.0.2", 1e300),
        r"non-finite or out-of-range",
    ),
    (
        "keypoint-names-repeat",
        "pose",
        _set("categories.0.keypoints", ["eye", "Eye"]),
        r"keypoint names repeat",
    ),
    ("keypoint-names-not-list", "pose", _set("categories.0.keypoints", 3), r"list of keypoint"),
    ("skeleton-out-of-range", "pose", _set("categories.0.skeleton", [[1, 9]]), r"'skeleton'"),
    (
        "obb-ring-overflows",
        "obb",
        _set("annotations.0.segmentation.0", [-3e38, 1.0, 3e38, 1.0, 3e38, 7.0, -3e38, 7.0]),
        r"spans more than float32 can hold",
    ),
]


def _refusal(root: Path, task: Task, match: str, named: Path, layout: str = "auto") -> str:
    with pytest.raises(DataFormatError, match=match) as info:
        read_split(root, "train", task=task, layout=layout)  # type: ignore[arg-type]
    msg = str(info.value)
    assert "\n" not in msg
    assert str(named) in msg
    return msg


@pytest.mark.parametrize(
    ("task", "change", "match"),
    [c[1:] for c in COCO_CASES],
    ids=[c[0] for c in COCO_CASES],
)
def test_coco_field_of_the_wrong_type_is_refused_naming_the_entry(
    tmp_path: Path, task: Task, change: Callable[[dict[str, Any]], None], match: str
) -> None:
    """A COCO field of the wrong type or out of range: one line naming the file and entry."""
    ann = _coco(tmp_path, change)
    _refusal(tmp_path, task, match, ann)


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b'{"images": [', r"train.json:1: not valid JSON"),
        (b'{"images": []}\n\xff', r"train.json:2: not UTF-8"),
        (b"[1, 2]", r"one JSON object, got list"),
        (b'"images annotations categories"', r"one JSON object, got str"),
        (
            b'{"images": [], "annotations": [], "categories": [], "annotations": []}',
            r"key 'annotations' appears twice in one object \(keys 'images', 'annotations', "
            r"'categories'\).*merge the two",
        ),
        (b'{"images": [{"id": 1, "file_name": "a.jpg", "id": 2}]}', r"key 'id' appears twice"),
    ],
    ids=["truncated", "not-utf8", "list", "string", "repeated-list", "repeated-field"],
)
def test_coco_file_that_is_not_a_json_object_is_refused_with_the_line(
    tmp_path: Path, raw: bytes, match: str
) -> None:
    """Truncated, non-UTF-8 or non-object JSON, or an object that repeats a key (the parser
    would keep the last silently): one line naming the file (and line or key)."""
    ann = _coco(tmp_path, lambda doc: None, raw=raw)
    _refusal(tmp_path, "detect", match, ann)


def _yolo(root: Path, yaml: str, labels: bytes, task: Task = "detect") -> Path:
    (root / "data.yaml").parent.mkdir(parents=True, exist_ok=True)
    (root / "data.yaml").write_text(yaml)
    _png(root / "images" / "train" / "a.png")
    lbl = root / "labels" / "train" / "a.txt"
    lbl.parent.mkdir(parents=True)
    lbl.write_bytes(labels)
    return lbl


YAML = "path: .\ntrain: images/train\nval: images/train\nnames: [cat, dog]\n"
POSE = "kpt_shape: [2, 3]\nflip_idx: [1, 0]\n"


@pytest.mark.parametrize(
    ("labels", "line"),
    [
        (b"nan 0.5 0.5 0.2 0.2\n", 1),
        (b"0 0.5 0.5 0.2 0.2\n0 0.5 inf 0.2 0.2\n", 2),
        (b"0 0.5 0.5 0.2 1e999\n", 1),
    ],
    ids=["class-nan", "coordinate-inf", "coordinate-overflow"],
)
def test_yolo_non_finite_value_is_refused_with_file_and_line(
    tmp_path: Path, labels: bytes, line: int
) -> None:
    """NaN / inf in a label line (class or coordinate) names the file and the line."""
    lbl = _yolo(tmp_path, YAML, labels)
    _refusal(tmp_path, "detect", rf"a\.txt:{line}: non-finite value", lbl)


def test_yolo_label_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    """A stray byte in a label file: refused with the line it sits on."""
    lbl = _yolo(tmp_path, YAML, b"0 0.5 0.5 0.2 0.2\n0 0.5\xff 0.5 0.2 0.2\n")
    _refusal(tmp_path, "detect", r"a\.txt:2: not UTF-8", lbl)


@pytest.mark.parametrize(
    ("yaml", "task", "match"),
    [
        ("path: .\ntrain: images/train\nnames: {a: cat}\n", "detect", r"'names' keys must be"),
        (YAML + "nc: x\n", "detect", r"'nc' is 'x'"),
        (YAML + "kpt_shape: [a, 3]\n", "pose", r"kpt_shape"),
        (YAML + "kpt_shape: [1000000000, 3]\n", "pose", r"1 <= K <= 1000"),
        (YAML + "kpt_shape: [2, 3]\nflip_idx: [0, 0]\n", "pose", r"'flip_idx' must order"),
        (YAML + "kpt_shape: [2, 3]\nflip_idx: [a, b]\n", "pose", r"'flip_idx' must be a list"),
        ("path: .\ntrain: 3\nnames: [cat]\n", "detect", r"'train' must name a folder"),
        (YAML.replace("names: [cat, dog]", "names: []"), "detect", r"'names' must be a non-emp"),
    ],
    ids=[
        "names-keys",
        "nc-text",
        "kpt-shape-text",
        "kpt-shape-huge",
        "flip-idx-repeat",
        "flip-idx-text",
        "train-number",
        "names-empty",
    ],
)
def test_yolo_data_yaml_value_of_the_wrong_type_is_refused_naming_the_file(
    tmp_path: Path, yaml: str, task: Task, match: str
) -> None:
    """data.yaml values of the wrong type or shape: one line naming data.yaml and the fix."""
    labels = b"0 0.5 0.5 0.2 0.2 0.5 0.5 2 0.4 0.4 2\n" if task == "pose" else b""
    _yolo(tmp_path, yaml, labels, task)
    _refusal(tmp_path, task, match, tmp_path / "data.yaml")


def _dota(root: Path, labels: bytes) -> Path:
    _png(root / "train" / "images" / "a.png")
    lbl = root / "train" / "labelTxt" / "a.txt"
    lbl.parent.mkdir(parents=True)
    lbl.write_bytes(labels)
    return lbl


@pytest.mark.parametrize(
    ("labels", "match"),
    [
        (b"gsd:0.5\n1 1 9 nan 9 7 1 7 plane 0\n", r"a\.txt:2: corner out of range"),
        (b"1 1 9 1 9 7 1e200 7 plane 0\n", r"a\.txt:1: corner out of range"),
        (b"1 1 9 1 9 7 1 7 plane 0\n\xc3\x28\n", r"a\.txt:2: not UTF-8"),
    ],
    ids=["corner-nan", "corner-overflows-the-box", "not-utf8"],
)
def test_dota_bad_corner_or_encoding_is_refused_with_file_and_line(
    tmp_path: Path, labels: bytes, match: str
) -> None:
    """DOTA corners that are NaN, inf or overflow the rotated box, and non-UTF-8 label files."""
    lbl = _dota(tmp_path, labels)
    _refusal(tmp_path, "obb", match, lbl)


def test_split_whose_images_are_all_skipped_is_refused_naming_folder_and_skips(
    tmp_path: Path,
) -> None:
    """Every listed image missing: the split is refused before training, with the folder, what
    was looked for and what was skipped (not a loader error later)."""
    _coco(tmp_path, _set("images.0.file_name", "gone.png"))
    with pytest.raises(EmptySplitError) as info:
        read_split(tmp_path, "train", task="detect")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{tmp_path / 'images' / 'train'}: split 'train' holds no usable image")
    assert "train.json" in msg
    assert "1 x missing image file" in msg


def test_split_folder_without_images_is_refused_saying_what_was_looked_for(
    tmp_path: Path,
) -> None:
    """An images folder with no image file: refused, naming the folder and the suffixes tried."""
    _yolo(tmp_path, YAML, b"")
    (tmp_path / "images" / "train" / "a.png").rename(tmp_path / "images" / "train" / "a.txt")
    with pytest.raises(
        EmptySplitError, match=r"holds no usable image .*jpg.*png.*1 x label file without an image"
    ):
        read_split(tmp_path, "train", task="detect")


def test_yolo_names_keyed_by_quoted_digits_still_load(tmp_path: Path) -> None:
    """The stricter key check still reads ``'0': cat`` (quoted indices, as some writers emit)."""
    yaml = "path: .\ntrain: images/train\nnames:\n  '0': cat\n  '1': dog\n"
    _yolo(tmp_path, yaml, b"1 0.5 0.5 0.2 0.2\n")
    index = read_split(tmp_path, "train", task="detect")
    assert index.schema.class_names == ("cat", "dog")
    assert index.records[0].targets.labels.tolist() == [1]


@pytest.mark.parametrize("sign", [1, -1])
def test_a_coordinate_is_refused_exactly_where_float32_would_hold_infinity(sign: int) -> None:
    """`number_list`'s plain comparisons refuse what numpy's float32 cast turns to inf, and only
    that: at float32's overflow bound, a float64 step either side, its largest value, an integer
    beyond float64 and the non-finite values."""
    bound = F32_OVERFLOW
    values: list[float | int] = [
        bound, float(np.nextafter(bound, 0)), float(np.nextafter(bound, np.inf)),
        float(np.finfo(np.float32).max), 1e308, 5e-324, 0.0, math.inf, math.nan,
        2**128 - 2**103 - 1, 2**128, 10**400,
    ]  # fmt: skip
    for value in values:
        x = sign * value
        try:
            with np.errstate(over="ignore"):
                expected = bool(np.isfinite(np.float32(np.float64(x))))
        except OverflowError:  # the integer beyond float64
            expected = False
        try:
            number_list([1.0, x], "a.json: annotation 1", "'bbox'")
            accepted = True
        except DataFormatError:
            accepted = False
        assert accepted == expected, x
