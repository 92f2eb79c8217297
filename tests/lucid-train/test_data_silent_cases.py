"""Inputs that used to change results without a word are now counted or refused in one line:
duplicate YAML keys, a split without annotations, label files without an image, a polygon
with an odd count of coordinates, an image under 10 px a side or in a format lucid does not
read, and a training image that turns corrupt mid-epoch."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from lucid_train.data import DataFormatError, EmptySplitError, LucidDataModule, read_split
from lucid_train.data.augment.config import AugmentConfig
from lucid_train.data.dataset import TrainDataset
from lucid_train.data.formats.dota import read_dota
from lucid_train.data.formats.yolo_files import NOT_AN_IMAGE, UNREAD_FORMAT
from lucid_train.data.image_io import too_small
from lucid_train.data.records import Task
from lucid_train.data.transport import collate
from lucid_train.run.skipped_images import SkippedImages, summary


def _yolo(root: Path, yaml: str, label: str, write_image: Callable[..., Path]) -> Path:
    write_image(root / "images" / "train" / "a.png", 32, 24)
    (root / "labels" / "train").mkdir(parents=True, exist_ok=True)
    (root / "labels" / "train" / "a.txt").write_text(label)
    (root / "data.yaml").write_text(yaml)
    return root


REFUSED = [
    # Was: the second key silently replaced the first, and class 1 was blamed on the label file.
    pytest.param(
        "path: .\ntrain: images/train\nnames:\n  0: cat\n  0: dog\n",
        "1 0.5 0.5 0.2 0.2\n",
        "detect",
        r"data\.yaml:5: key 0 appears twice under 'names' ",
        id="duplicate-names-key-names-file-line-and-key",
    ),
    pytest.param(
        "path: .\ntrain: images/train\nnames: {0: cat, 0: dog}\n",
        "",
        "detect",
        r"data\.yaml:3: key 0 appears twice",
        id="duplicate-key-inside-an-inline-mapping",
    ),
    # Was: "needs at least 3 x y points ...; remove the line": the set is boxes, not polygons.
    pytest.param(
        "path: .\ntrain: images/train\nnames: [cat]\n",
        "0 0.5 0.5 0.2 0.2\n",
        "segment",
        r"a\.txt:1: .*at least 3 x y points, got 4 coordinate values: a box line "
        r"\(class cx cy w h\) if the set holds boxes, which a segment model cannot be trained",
        id="box-line-for-a-segment-model-says-to-train-detect",
    ),
    # Was: "expected 5 values for task 'detect', got 26", without a way out.
    pytest.param(
        "path: .\ntrain: images/train\nnames: [cat]\n",
        "0 0.5 0.5 0.2 0.2" + " 0.5 0.5 2" * 7 + "\n",
        "detect",
        r"a\.txt:1: expected 5 values for task 'detect', got 26; .*kpt_shape: \[K, D\]",
        id="pose-line-for-a-detect-model-names-kpt-shape",
    ),
    # Was: seven values (3.5 points) were called 'fewer than 3 points'.
    pytest.param(
        "path: .\ntrain: images/train\nnames: [cat]\n",
        "0 0.1 0.1 0.5 0.1 0.5 0.5 0.1\n",
        "segment",
        r"a\.txt:1: .*odd count of 7 coordinate values",
        id="polygon-with-an-odd-count-of-coordinates",
    ),
]


@pytest.mark.parametrize(("yaml", "label", "task", "message"), REFUSED)
def test_a_malformed_yolo_file_is_refused_naming_file_and_line(
    tmp_path: Path,
    write_image: Callable[..., Path],
    yaml: str,
    label: str,
    task: Task,
    message: str,
) -> None:
    _yolo(tmp_path, yaml, label, write_image)
    with pytest.raises(DataFormatError, match=message):
        read_split(tmp_path, "train", task=task)


def test_a_label_file_without_an_image_is_counted(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    _yolo(tmp_path, "path: .\ntrain: images/train\nnames: [cat]\n", "0 .5 .5 .2 .2\n", write_image)
    (tmp_path / "labels" / "train" / "orphan.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    index = read_split(tmp_path, "train", task="detect")
    assert index.report.counts == {"label file without an image (ignored)": 1}
    assert index.report.examples["label file without an image (ignored)"][0].endswith("orphan.txt")


def test_an_image_in_a_format_lucid_does_not_read_is_counted_once_as_such(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """The authors' loader reads .heic, .jp2, .mpo, ... (and takes .gif for a video); ours
    counts such a file in a folder or a list, and not again as its label's orphan. Was: the
    image was passed over unsaid and its label counted as a label without an image."""
    _yolo(tmp_path, "path: .\ntrain: images/train\nnames: [cat]\n", "0 .5 .5 .2 .2\n", write_image)
    for name in ("b.gif", "c.HEIC", "d.jp2"):
        (tmp_path / "images" / "train" / name).write_bytes(b"not read")
    (tmp_path / "labels" / "train" / "b.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    index = read_split(tmp_path, "train", task="detect")
    assert [r.path.name for r in index.records] == ["a.png"]
    assert index.report.counts == {UNREAD_FORMAT: 3}
    assert index.report.examples[UNREAD_FORMAT][0].endswith("b.gif")
    (tmp_path / "train.txt").write_text("images/train/a.png\nimages/train/b.gif\n")
    (tmp_path / "data.yaml").write_text("path: .\ntrain: train.txt\nnames: [cat]\n")
    index = read_split(tmp_path, "train", task="detect")
    assert index.report.counts == {UNREAD_FORMAT: 1}
    assert index.report.examples[UNREAD_FORMAT] == [f"{tmp_path / 'train.txt'}:2"]


def test_an_unreadable_image_is_counted_once_not_again_as_its_labels_orphan(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """A truncated image is skipped and counted; its label file belongs to it, so it is not
    also reported as a label file without an image (was: two items for one image)."""
    _yolo(tmp_path, "path: .\ntrain: images/train\nnames: [cat]\n", "0 .5 .5 .2 .2\n", write_image)
    write_image(tmp_path / "images" / "train" / "b.png", 32, 24)
    (tmp_path / "labels" / "train" / "b.txt").write_text("0 .5 .5 .2 .2\n")
    b = tmp_path / "images" / "train" / "b.png"
    b.write_bytes(b.read_bytes()[:40])
    index = read_split(tmp_path, "train", task="detect", verify="full")
    assert index.report.counts == {"corrupt or truncated image": 1}, index.report.counts
    assert len(index.records) == 1


_ONE_CAT = "path: .\ntrain: images/train\nnames: [cat]\n"


def test_an_image_listed_twice_is_read_once_and_counted(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """Was: a folder named twice (or a repeated line of a list) trained every image twice."""
    _yolo(
        tmp_path,
        "path: .\ntrain: [images/train, images/train]\nnames: [cat]\n",
        "0 .5 .5 .2 .2\n",
        write_image,
    )
    index = read_split(tmp_path, "train", task="detect")
    assert len(index.records) == 1
    assert index.report.counts == {"image listed twice (read once)": 1}


def test_two_images_sharing_one_label_file_are_counted_and_one_is_read(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """Was: ``a.png`` and ``a.jpg`` both trained on ``labels/train/a.txt``, without a word."""
    _yolo(tmp_path, _ONE_CAT, "0 .5 .5 .2 .2\n", write_image)
    write_image(tmp_path / "images" / "train" / "a.jpg", 32, 24)
    index = read_split(tmp_path, "train", task="detect")
    assert [r.path.name for r in index.records] == ["a.jpg"]
    reason = "image sharing its label file with another image (skipped)"
    assert index.report.counts == {reason: 1}
    assert "a.png" in index.report.examples[reason][0]


def test_a_folder_linked_into_the_split_is_read(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """Was: images under a symbolic link to a folder were left out, and their labels counted as
    label files without an image; a link back up is walked once."""
    root = _yolo(tmp_path / "set", _ONE_CAT, "0 .5 .5 .2 .2\n", write_image)
    write_image(tmp_path / "more" / "b.png", 32, 24)
    (root / "images" / "train" / "more").symlink_to(tmp_path / "more", target_is_directory=True)
    (root / "images" / "train" / "up").symlink_to(root / "images", target_is_directory=True)
    (root / "labels" / "train" / "more").mkdir()
    (root / "labels" / "train" / "more" / "b.txt").write_text("0 .5 .5 .2 .2\n")
    index = read_split(root, "train", task="detect")
    assert sorted(r.path.name for r in index.records) == ["a.png", "b.png"]
    assert index.report.counts == {}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("train: nowhere/images", r"'train: nowhere/images' does not exist: looked for .*nowhere"),
        ("train: images\\train", r"Windows way: .*forward slashes"),
    ],
    ids=["missing-folder", "backslashes"],
)
def test_a_split_path_that_names_nothing_says_so_and_how_it_was_read(
    tmp_path: Path, write_image: Callable[..., Path], entry: str, message: str
) -> None:
    _yolo(tmp_path, f"path: .\n{entry}\nnames: [cat]\n", "", write_image)
    with pytest.raises(DataFormatError, match=message):
        read_split(tmp_path, "train", task="detect")


def test_a_relative_path_folder_that_names_nothing_says_where_it_was_read_from(
    tmp_path: Path,
    write_image: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``path: datasets/x`` meant from the working directory (the authors' tools try it
    first) is read from the data.yaml's folder: the refusal says so and names the folder that
    does exist. Was: only the split path looked for."""
    data = tmp_path / "datasets" / "x"
    _yolo(data, "path: .\ntrain: images/train\nnames: [cat]\n", "0 .5 .5 .2 .2\n", write_image)
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "data.yaml").write_text(
        "path: datasets/x\ntrain: images/train\nnames: [cat]\n"
    )
    monkeypatch.chdir(tmp_path)
    said = (
        r"'path' itself does not exist \(a relative 'path' is read from the folder of "
        r"data\.yaml, .*cfg\); it does exist under the working directory: write 'path: .*x'"
    )
    with pytest.raises(DataFormatError, match=said):
        read_split(tmp_path / "cfg" / "data.yaml", "train", task="detect")


def test_an_image_list_line_starting_dot_slash_is_read_from_the_lists_folder_too(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """As the authors' reader takes './' in a list: from the list's own folder (a list in
    ``lists/``). Was: every such line counted as a missing image, the split refused."""
    _yolo(tmp_path, "path: .\ntrain: lists/t.txt\nnames: [cat]\n", "0 .5 .5 .2 .2\n", write_image)
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "t.txt").write_text("./../images/train/a.png\n")
    index = read_split(tmp_path, "train", task="detect")
    assert [r.path.name for r in index.records] == ["a.png"] and not index.report.counts


def test_a_windows_path_in_an_image_list_names_the_list_and_line(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    _yolo(tmp_path, "path: .\ntrain: train.txt\nnames: [cat]\n", "0 .5 .5 .2 .2\n", write_image)
    (tmp_path / "train.txt").write_text("images/train/a.png\nC:\\data\\images\\b.png\n")
    with pytest.raises(DataFormatError, match=r"train\.txt:2: .*Windows way"):
        read_split(tmp_path, "train", task="detect")


def test_an_image_list_line_that_names_no_image_is_counted_by_what_it_names(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """Was: a missing absolute path or a non-image line was refused as "must sit under an
    'images' folder" without the list's name, and a folder counted as a corrupt image. Now
    a missing file is counted as missing, a folder as a folder, a line without an image suffix
    skipped and counted (the authors' reader filters them), and an image outside an 'images'
    folder refused naming the list and line."""
    _yolo(tmp_path, "path: .\ntrain: train.txt\nnames: [cat]\n", "0 .5 .5 .2 .2\n", write_image)
    (tmp_path / "images" / "train" / "odd.png").mkdir()
    lines = ["images/train/a.png", "/abs/missing.png", "data.yaml", "images/train"]
    (tmp_path / "train.txt").write_text("\n".join([*lines, "images/train/odd.png"]) + "\n")
    index = read_split(tmp_path, "train", task="detect")
    assert [r.path.name for r in index.records] == ["a.png"]
    assert index.report.counts == {
        "missing image file": 1,
        NOT_AN_IMAGE: 2,
        "image list line naming a folder (skipped)": 1,
    }
    listed = tmp_path / "train.txt"
    assert index.report.examples[NOT_AN_IMAGE] == [f"{listed}:3", f"{listed}:4"]
    write_image(tmp_path / "elsewhere" / "b.png", 32, 24)
    (tmp_path / "train.txt").write_text("images/train/a.png\nelsewhere/b.png\n")
    with pytest.raises(DataFormatError, match=r"train\.txt:2: .*b\.png is not under an 'images'"):
        read_split(tmp_path, "train", task="detect")


def _coco(root: Path, anns: list[dict[str, object]], write_image: Callable[..., Path]) -> Path:
    for split in ("train", "val"):
        write_image(root / "images" / split / "a.png", 32, 24)
        doc = {
            "images": [{"id": 1, "file_name": "a.png", "width": 32, "height": 24}],
            "annotations": anns,
            "categories": [{"id": 1, "name": "cat"}],
        }
        (root / "annotations").mkdir(parents=True, exist_ok=True)
        (root / "annotations" / f"{split}.json").write_text(json.dumps(doc))
    return root


def test_a_coco_ring_with_an_odd_count_of_coordinates_is_counted_as_such(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    ring = [1.0, 1.0, 9.0, 1.0, 9.0, 7.0, 1.0]
    ann = {"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 8, 6], "segmentation": [ring]}
    _coco(tmp_path, [ann], write_image)
    index = read_split(tmp_path, "train", task="segment", layout="coco")
    assert index.report.counts == {
        "polygon with an odd count of coordinates: kept, its box as the mask": 1
    }
    (ring,) = index.records[0].targets.polygons or ()
    np.testing.assert_allclose(ring, [[1, 1], [9, 1], [9, 7], [1, 7]])
    obb = read_split(tmp_path, "train", task="obb", layout="coco")
    assert obb.report.counts == {"polygon with an odd count of coordinates": 1}


def test_a_split_without_any_annotation_is_refused_unless_allowed(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """Was: it trained on backgrounds and scored nothing, silently."""
    root = _coco(tmp_path, [], write_image)
    dm = LucidDataModule("detect", root, img_size=64, batch_size=1, num_workers=0)
    with pytest.raises(EmptySplitError, match=r"split 'train' has 1 image\(s\) and not one "):
        dm.setup("fit")
    with pytest.raises(EmptySplitError, match=r"--data.allow_empty true"):
        LucidDataModule("detect", root, img_size=64, batch_size=1).setup("validate")
    allowed = LucidDataModule("detect", root, img_size=64, batch_size=1, allow_empty=True)
    allowed.setup("fit")
    assert len(allowed.split_index("train").records) == 1


def test_an_image_under_ten_pixels_a_side_is_skipped_and_counted_by_every_reader(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """As the authors' loader drops it (`tests/peer/test_reader_ladder.py` holds theirs). Was:
    a 1 x 1 image trained, upscaled to the canvas."""
    reason = too_small(9, 24)
    assert reason is not None and too_small(10, 10) is None
    ann = {"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 4, 4]}
    coco = _coco(tmp_path / "coco", [ann], write_image)
    doc = json.loads((coco / "annotations" / "train.json").read_text())
    doc["images"].append({"id": 2, "file_name": "b.png", "width": 9, "height": 24})
    doc["annotations"].append({**ann, "id": 2, "image_id": 2})
    (coco / "annotations" / "train.json").write_text(json.dumps(doc))
    write_image(coco / "images" / "train" / "b.png", 9, 24)
    index = read_split(coco, "train", task="detect", layout="coco")
    assert [r.path.name for r in index.records] == ["a.png"]
    assert index.report.counts == {reason: 1}

    yolo = _yolo(tmp_path / "yolo", "path: .\ntrain: images/train\nnames: [a]\n", "", write_image)
    write_image(yolo / "images" / "train" / "b.png", 24, 9)
    (yolo / "labels" / "train" / "b.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    index = read_split(yolo, "train", task="detect", layout="yolo")
    assert [r.path.name for r in index.records] == ["a.png"]
    assert index.report.counts == {reason: 1}

    dota = tmp_path / "dota" / "train"
    for name, (w, h) in {"a": (32, 24), "b": (9, 9)}.items():
        write_image(dota / "images" / f"{name}.png", w, h)
        (dota / "labelTxt").mkdir(parents=True, exist_ok=True)
        (dota / "labelTxt" / f"{name}.txt").write_text("1 1 6 1 6 6 1 6 plane 0\n")
    index = read_dota(tmp_path / "dota", "train", class_names=("plane",))
    assert [r.path.name for r in index.records] == ["a.png"]
    assert index.report.counts == {reason: 1}


def test_an_image_that_turns_corrupt_mid_epoch_is_skipped_and_counted(
    small_synthetic: Callable[[str], Path],
) -> None:
    """Its samples take the next image of the split (targets and all); the batch names it and
    the epoch's summary counts it. Was: `CorruptImageError` ended the fit."""
    dm = LucidDataModule("detect", small_synthetic("detect"), img_size=64, batch_size=4)
    index = dm.split_index("train")
    bad = index.records[0].path
    data = TrainDataset(index.records, index.schema, 64, AugmentConfig(), pool_size=4)
    good = bad.read_bytes()
    try:
        bad.write_bytes(good[: len(good) // 3])  # truncated after the split was read
        samples = [data[(0, p)] for p in range(len(data))]
    finally:
        bad.write_bytes(good)
    skipped = [s for s in samples if s.skipped]
    assert skipped and all(s.skipped == (str(bad),) for s in skipped)
    assert all(s.image is not None and s.image.shape == (64, 64, 3) for s in samples)
    batch = collate(samples[:4])
    assert batch.to("cpu").skipped == tuple(p for s in samples[:4] for p in s.skipped)
    counter = SkippedImages()
    for i in range(0, len(samples), 4):
        counter.on_train_batch_start(None, None, (collate(samples[i : i + 4]), {}), i)  # type: ignore[arg-type]
    assert counter.samples == {str(bad): len(skipped)}
    line = summary(3, counter.samples)
    assert line.startswith("lucid data: epoch 3: 1 training image(s) could not be decoded")
    assert str(bad) in line and "\n" not in line
    assert np.isfinite(batch.boxes.numpy()).all()
