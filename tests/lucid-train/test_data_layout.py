"""Layout probing finds COCO, split-folder COCO, YOLO and DOTA folders, honours an explicit
override, and refuses unknown or ambiguous folders listing every layout probed."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lucid_train.data.formats.coco import read_coco
from lucid_train.data.formats.layout import LAYOUTS, LayoutError, read_split, resolve_layout
from lucid_train.data.formats.yolo_txt import write_yolo
from lucid_train.data.records import Task


def test_synthetic_cache_folder_is_coco_layout(small_synthetic: Callable[[Task], Path]) -> None:
    """The built-in set is found as 'coco' and read through the COCO reader."""
    root = small_synthetic("detect")
    assert resolve_layout(root, "val", "detect").layout == "coco"
    assert len(read_split(root, "val", task="detect")) == 6


def test_split_folders_yolo_and_dota_are_recognised(
    tmp_path: Path, small_synthetic: Callable[[Task], Path]
) -> None:
    """Each layout's marker files select it."""
    rf = tmp_path / "rf"
    (rf / "train").mkdir(parents=True)
    (rf / "train" / "_annotations.coco.json").write_text(
        json.dumps({"images": [], "annotations": [], "categories": []})
    )
    assert resolve_layout(rf, "train", "detect").layout == "coco-split-folders"

    root = small_synthetic("detect")
    index = read_coco(root / "annotations" / "val.json", root / "images" / "val", task="detect")
    write_yolo({"val": index}, tmp_path / "yolo")
    assert resolve_layout(tmp_path / "yolo", "val", "detect").layout == "yolo"
    assert len(read_split(tmp_path / "yolo", "val", task="detect")) == 6
    assert resolve_layout(tmp_path / "yolo" / "data.yaml", "val", "detect").layout == "yolo"

    dota = tmp_path / "dota"
    (dota / "train" / "images").mkdir(parents=True)
    (dota / "train" / "labelTxt").mkdir(parents=True)
    assert resolve_layout(dota, "train", "obb").layout == "dota"


def test_unknown_layout_lists_the_layouts_probed(tmp_path: Path) -> None:
    """An empty folder is refused; the message lists every layout and what it expects."""
    with pytest.raises(LayoutError, match="unknown dataset layout") as info:
        resolve_layout(tmp_path, "train", "detect")
    for name in LAYOUTS:
        assert f"{name}:" in str(info.value)


def test_a_dataset_root_that_is_a_file_or_missing_is_refused_by_name(tmp_path: Path) -> None:
    notes = tmp_path / "data.txt"
    notes.write_text("images/train\n")
    with pytest.raises(LayoutError, match=r"data.txt: a file, not a dataset folder; pass the"):
        resolve_layout(notes, "train", "detect")
    with pytest.raises(LayoutError, match=r"nothere: no such dataset folder"):
        resolve_layout(tmp_path / "nothere", "train", "detect")


def test_a_folder_in_place_of_the_coco_annotation_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "annotations" / "val.json").mkdir(parents=True)
    (tmp_path / "images" / "val").mkdir(parents=True)
    with pytest.raises(LayoutError, match=r"val.json: a folder where the COCO annotation file"):
        resolve_layout(tmp_path, "val", "detect")


def test_ambiguous_layout_is_refused_until_chosen(
    tmp_path: Path, small_synthetic: Callable[[Task], Path]
) -> None:
    """A folder that is both COCO and YOLO is refused; layout= picks one."""
    root = tmp_path / "both"
    shutil.copytree(small_synthetic("detect"), root)
    index = read_coco(root / "annotations" / "val.json", root / "images" / "val", task="detect")
    write_yolo({"val": index}, root)
    with pytest.raises(
        LayoutError, match=r"ambiguous dataset layout.*matches coco, yolo.*Pass layout="
    ):
        resolve_layout(root, "val", "detect")
    assert resolve_layout(root, "val", "detect", layout="yolo").layout == "yolo"
    with pytest.raises(LayoutError, match="not found in layout 'dota'"):
        resolve_layout(root, "val", "detect", layout="dota")


def test_roboflow_exports_are_read_or_named_with_the_flag(
    tmp_path: Path, small_synthetic: Callable[[Task], Path], caplog: pytest.LogCaptureFixture
) -> None:
    """Roboflow's COCO export names its val split 'valid': the refusal names the split it holds
    and the flag. Its YOLO export's data.yaml says 'val: ../valid/images' beside its own valid/
    folder: read there, as the authors' tools read it, and said."""
    rf = tmp_path / "rf"
    (rf / "valid").mkdir(parents=True)
    (rf / "valid" / "_annotations.coco.json").write_text(
        json.dumps({"images": [], "annotations": [], "categories": []})
    )
    with pytest.raises(
        LayoutError, match=r"It holds split 'valid' \(coco-split-folders\): pass --data.val_split"
    ):
        resolve_layout(rf, "val", "detect")

    root = small_synthetic("detect")
    index = read_coco(root / "annotations" / "val.json", root / "images" / "val", task="detect")
    write_yolo({"val": index}, tmp_path / "yolo")
    export = tmp_path / "yolo"
    (export / "valid").mkdir()
    shutil.move(export / "images" / "val", export / "valid" / "images")
    shutil.move(export / "labels" / "val", export / "valid" / "labels")
    text = (export / "data.yaml").read_text()
    (export / "data.yaml").write_text(text.replace("val: 'images/val'", "val: ../valid/images"))
    assert "val: ../valid/images" in (export / "data.yaml").read_text()
    assert len(read_split(export, "val", task="detect")) == 6
    assert "'val: ../valid/images' names nothing there; reading" in caplog.text
