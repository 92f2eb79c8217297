"""``predict_images`` writes each task's extras (rotated boxes, keypoints, masks) in source
pixels, one JSON entry and one overlay per image."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lucid_train.cli.command_errors import error_line
from lucid_train.cli.predict import iter_images, predict_images
from lucid_train.data import LucidDataModule
from lucid_train.data.image_io import CorruptImageError
from lucid_train.errors import SettingError
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


def test_videos_and_unread_formats_in_a_folder_are_counted_with_their_fix(
    tmp_path: Path, write_image: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder's .heic photos and clips were passed over without a word (a split counts them)."""
    (tmp_path / "clip.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "phone.HEIC").write_bytes(b"\x00")
    (tmp_path / "notes.txt").write_text("not an image, not counted")
    with pytest.raises(FileNotFoundError, match=r"no images .*; it holds 1 video\(s\) \(clip"):
        list(iter_images(tmp_path))
    write_image(tmp_path / "a.png", 32, 32)
    assert [q.name for q in iter_images(tmp_path)] == ["a.png"]
    err = capsys.readouterr().err
    assert "lucid predict: passed over 1 video(s) (clip.mp4): extract their frames" in err, err
    assert "1 image(s) in a format lucid does not read (phone.HEIC): convert them" in err, err


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


def _untrained_detector(root: Path) -> Any:
    s = LucidDataModule("detect", root, img_size=64, batch_size=2, num_workers=0).schema
    return module_class("detect")(
        num_classes=s.num_classes, class_names=s.class_names, img_size=64, max_det=5
    )


def test_images_of_one_stem_each_keep_their_overlay(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """Was: ``a.jpg`` beside ``a.png`` (or ``x/a.jpg`` and ``y/a.jpg``) wrote one ``a.jpg``
    overlay over the other; each now has its own, named in its entry."""
    root = small_synthetic("detect")
    good = next(iter_images(root / "images" / "val")).read_bytes()
    folder = tmp_path / "in"
    for name in ("a.png", "x/a.png", "y/a.png"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(good)
    (folder / "a.jpg").write_bytes(good)  # a PNG's bytes: decoded by its content
    out = predict_images(_untrained_detector(root), folder, tmp_path / "out", conf=0.0)
    entries = json.loads(out.read_text())
    overlays = [e["overlay"] for e in entries]
    assert overlays == ["a.jpg", "a.png.jpg", "x/a.jpg", "y/a.jpg"]
    assert all((tmp_path / "out" / o).is_file() for o in overlays)
    # an image skipped as undecodable keeps its name: the others' overlays do not move
    (folder / "a.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    out = predict_images(_untrained_detector(root), folder, tmp_path / "out2", conf=0.0)
    assert [e["overlay"] for e in json.loads(out.read_text())] == overlays[1:]


def test_an_output_folder_that_is_a_file_is_one_line_naming_it(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """Was: a traceback (FileExistsError from mkdir) for ``--out`` naming a file."""
    root = small_synthetic("detect")
    (tmp_path / "taken").write_text("")
    image = next(iter_images(root / "images" / "val"))
    for out in (tmp_path / "taken", tmp_path / "taken" / "sub"):
        with pytest.raises(OSError) as caught:
            predict_images(_untrained_detector(root), image, out)
        assert f"cannot make the folder {out}: " in (error_line(caught.value) or "")


def test_a_wildcard_source_is_told_to_pass_the_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"does not expand wildcards: pass the folder"):
        list(iter_images(f"{tmp_path}/*.jpg"))


def test_a_url_source_and_an_unknown_device_are_one_line_each(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """Was: the URL folded to ``https:/...`` and "no such file"; torch's traceback for a device
    it does not know."""
    with pytest.raises(FileNotFoundError, match=r"https://x\.org/a\.jpg: a URL; .* download it"):
        list(iter_images("https://x.org/a.jpg"))
    root = small_synthetic("detect")
    image = next(iter_images(root / "images" / "val"))
    with pytest.raises(SettingError, match=r"--device banana: not a device; use cpu, cuda"):
        predict_images(_untrained_detector(root), image, tmp_path / "out", device="banana")


@pytest.mark.parametrize(("verb", "flag"), [("predict", "--out"), ("validate", "--save_dir")])
def test_a_folder_that_cannot_be_made_names_the_verbs_flag(verb: str, flag: str) -> None:
    """The system's own errors, named with the flag that picks the folder. Was: a bare
    "[Errno 2] ..." for a folder under /proc, and "--out, or --run.root" for validate."""
    import errno

    missing = FileNotFoundError(errno.ENOENT, "No such file or directory", "/proc/x")
    assert error_line(missing, verb) == (
        "/proc/x: No such file or directory; check the path (for an output, pick a folder you "
        f"can make ({flag}))"
    )
    taken = FileExistsError(errno.EEXIST, "File exists", "/tmp/taken")
    assert (error_line(taken, verb) or "").endswith(f"not a file's path ({flag})")


def test_an_output_folder_where_overlays_would_replace_the_images_is_refused(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """Was: ``--out`` the source folder wrote each ``a.jpg`` overlay over the image ``a.jpg``
    (the source images lost); refused now before anything is written, the images untouched."""
    root = small_synthetic("detect")
    good = next(iter_images(root / "images" / "val")).read_bytes()
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(good)  # a PNG's bytes: decoded by its content
    (folder / "b.png").write_bytes(good)
    with pytest.raises(SettingError, match=r"--out .*in: the overlay of .*a\.jpg would replace"):
        predict_images(_untrained_detector(root), folder, folder, conf=0.0)
    assert (folder / "a.jpg").read_bytes() == good
    assert sorted(p.name for p in folder.iterdir()) == ["a.jpg", "b.png"]
    out = predict_images(_untrained_detector(root), folder / "b.png", folder, conf=0.0)
    assert (folder / "b.jpg").is_file() and out.is_file()  # no image of that name: written


def test_a_text_file_listing_images_is_told_to_become_a_folder(tmp_path: Path) -> None:
    """The authors' predict reads a .txt source as a list of images. Was: "cannot decode image
    (cannot identify image file ...); re-encode it"."""
    listed = tmp_path / "images.txt"
    listed.write_text(f"{tmp_path / 'a.jpg'}\n")
    with pytest.raises(CorruptImageError, match=r"images\.txt: a text file; .* into one folder"):
        list(iter_images(listed))
