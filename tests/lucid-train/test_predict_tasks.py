"""``predict_images`` writes each task's extras (rotated boxes, keypoints, masks) in source
pixels, one JSON entry and one overlay per image."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from lucid_train.cli.predict import iter_images, predict_images
from lucid_train.data import LucidDataModule
from lucid_train.data.image_io import CorruptImageError
from lucid_train.tasks.task_modules import module_class

EXTRA = {"detect": None, "segment": "mask_rle", "pose": "keypoints", "obb": "rotated"}


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_predict_writes_the_task_extras(
    task: str, small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    root = small_synthetic(task)
    dm = LucidDataModule(task, root, img_size=64, batch_size=2, num_workers=0)  # type: ignore[arg-type]
    s = dm.schema
    module = module_class(s.task)(
        num_classes=s.num_classes, class_names=s.class_names,
        num_keypoints=s.num_keypoints or None, keypoint_names=s.keypoint_names,
        skeleton=s.skeleton, img_size=64, max_det=5,
    )  # fmt: skip
    image = next(iter_images(root / "images" / "val"))
    out = predict_images(module, image, tmp_path, conf=0.0)
    (entry,) = json.loads(out.read_text())
    assert entry["detections"], "an untrained model at conf 0 still returns its top-k"
    det = entry["detections"][0]
    if EXTRA[task] is not None:
        assert EXTRA[task] in det
    if task == "segment":
        assert det["mask_rle"]["size"] == [entry["height"], entry["width"]]
    assert (tmp_path / f"{image.stem}.jpg").is_file()


def test_a_missing_source_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nothing"):
        list(iter_images(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError, match="no images"):
        list(iter_images(tmp_path))


def test_a_video_source_is_told_to_become_frames(tmp_path: Path) -> None:
    """Was: "cannot decode image ...; re-encode it"."""
    clip = tmp_path / "clip.MP4"
    clip.write_bytes(b"\x00\x00\x00\x18ftypmp42")
    with pytest.raises(CorruptImageError, match=r"clip\.MP4: a video; .*ffmpeg"):
        list(iter_images(clip))


def test_a_folder_with_a_bad_file_predicts_the_rest_and_counts_it(
    small_synthetic: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: the first undecodable file stopped the whole folder."""
    root = small_synthetic("detect")
    dm = LucidDataModule("detect", root, img_size=64, batch_size=2, num_workers=0)
    s = dm.schema
    module = module_class("detect")(
        num_classes=s.num_classes, class_names=s.class_names, img_size=64, max_det=5
    )
    folder = tmp_path / "in"
    folder.mkdir()
    good = next(iter_images(root / "images" / "val"))
    (folder / "good.png").write_bytes(good.read_bytes())
    (folder / "bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    out = predict_images(module, folder, tmp_path / "out", conf=0.0)
    entries = json.loads(out.read_text())
    assert [Path(e["file"]).name for e in entries] == ["good.png"]
    err = capsys.readouterr().err
    assert "lucid predict: skipped 1 of 2 image(s)" in err and "bad.jpg" in err
    (folder / "good.png").unlink()
    with pytest.raises(CorruptImageError, match=r"none of its 1 image\(s\) can be decoded"):
        predict_images(module, folder, tmp_path / "out2", conf=0.0)
