"""YOLO txt: the data.yaml subset parser, the four label formats, refusals with file and line,
missing vs empty label files, and the COCO → Targets → YOLO txt → Targets round trip."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from lucid_train.data.builtin_sets.synthetic import main as synthetic_main
from lucid_train.data.formats.coco import read_coco
from lucid_train.data.formats.data_yaml import dump_data_yaml, parse_data_yaml
from lucid_train.data.formats.yolo_txt import DUPLICATE_LINE, MissingLabels, read_yolo, write_yolo
from lucid_train.data.records import DataFormatError, Task

YAML = """# a comment
path: .   # root
train: images/train
val: images/val
nc: 2
names:
  0: cat
  1: 'hot dog'
kpt_shape: [3, 3]
flip_idx: [0, 2, 1]
download: |
  some script
  that is ignored
"""


def test_data_yaml_subset_parses_scalars_lists_mappings_and_block_text() -> None:
    """The subset YOLO files use parses to plain Python values."""
    cfg = parse_data_yaml(YAML)
    assert cfg["path"] == "."
    assert cfg["nc"] == 2
    assert cfg["names"] == {0: "cat", 1: "hot dog"}
    assert cfg["kpt_shape"] == [3, 3]
    assert cfg["flip_idx"] == [0, 2, 1]
    assert cfg["download"] == "some script\nthat is ignored"
    assert parse_data_yaml("names:\n  - a\n  - b\n")["names"] == ["a", "b"]
    assert parse_data_yaml(dump_data_yaml(cfg)) == cfg


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("names: &anchor [a]\n", r"data.yaml:1: YAML feature '&'"),
        ("a: 1\na: 2\n", r"data.yaml:2: key 'a' appears twice"),
        ("names:\n  - a\n  0: b\n", r"data.yaml:3: mixes list items"),
        ("  indented: 1\n", r"data.yaml:1: unexpected indentation"),
        ("names: [a, b\n", r"data.yaml:1: inline list must end"),
    ],
)
def test_data_yaml_refuses_what_it_does_not_read_with_the_line(text: str, match: str) -> None:
    """Unsupported YAML is refused with file:line, never guessed."""
    with pytest.raises(DataFormatError, match=match):
        parse_data_yaml(text)


def test_data_yaml_block_lists_at_the_keys_column_parse_as_pyyaml_writes_them() -> None:
    """PyYAML's ``safe_dump`` (the authors' ``YAML.save``) writes a list at its key's column;
    it was refused as "expected 'key: value', got '- a'"."""
    cfg = parse_data_yaml("train:\n- images/a\n- images/b\nnames:\n- cat\n-  dog\nnc: 2\n")
    assert cfg == {"train": ["images/a", "images/b"], "names": ["cat", "dog"], "nc": 2}
    with pytest.raises(DataFormatError, match=r"data.yaml:2: expected 'key: value', got '- b'"):
        parse_data_yaml("path: .\n- b\n")  # under a key with a value: still refused


def test_data_yaml_single_quoted_scalars_read_a_doubled_quote_as_one() -> None:
    """YAML's escape in single quotes: 'it''s' is it's (it read as it''s)."""
    assert parse_data_yaml("names: ['it''s', 'b']\n")["names"] == ["it's", "b"]


@pytest.mark.parametrize(
    "text",
    [
        'names: ["a\\"b", "caf\\u00e9", "tab\\there", "x\\\\y", "a # b"]  # comment\n',
        'path: "C:\\\\data\\\\set"\n',
        "names: [nan, inf, NaN, 1e3, 1.5e+3, .inf, -.inf, 0.5_0, 1_000, +3, -.5, 3., .5]\n",
        "names:\n  0: 1e3\n  1: nan\n  2: 'it''s'\n",
        "names: [it's, b]  # a quote inside a plain name is text\n",
        "path: it's here  # a comment\n",
    ],
)
def test_data_yaml_scalars_read_as_pyyaml_reads_them(text: str) -> None:
    """The authors load data.yaml with PyYAML: double-quoted escapes are decoded (they were kept
    as written), a float needs its dot, and ``nan`` / ``inf`` / ``1e3`` are class names, not
    numbers (Python's ``float`` read them as floats). Compared with PyYAML at test time, by
    ``repr`` so that a text 'nan' and a float nan differ and two float nans agree."""
    assert repr(parse_data_yaml(text)) == repr(yaml.safe_load(text))


def test_data_yaml_zero_padded_names_keys_read_as_their_numbers() -> None:
    """``08: cat`` keeps the reading it had before PyYAML's scalars: decimal (PyYAML: octal,
    where 08 is not a number at all)."""
    assert parse_data_yaml("names:\n  00: a\n  08: b\n  10: c\n")["names"] == {
        0: "a", 8: "b", 10: "c"
    }  # fmt: skip


def test_data_yaml_written_by_lucid_keeps_quotes_in_names() -> None:
    """``dump_data_yaml`` dropped a name's single quotes (it's became its)."""
    cfg = {"names": {0: "it's", 1: 'say "hi"'}, "nc": 2}
    assert parse_data_yaml(dump_data_yaml(cfg)) == cfg


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('names: ["a\\qb"]\n', r"data.yaml:1: unknown escape '\\q'.*single-quote"),
        ('names: ["\\x4"]\n', r"data.yaml:1: '\\x' needs 2 hex digits"),
        ('names: "abc\\"\n', r"data.yaml:1: unterminated quoted string"),
    ],
)
def test_data_yaml_bad_escapes_name_the_line_and_the_fix(text: str, match: str) -> None:
    with pytest.raises(DataFormatError, match=match):
        parse_data_yaml(text)


@pytest.mark.parametrize(
    ("line", "fix"),
    [
        ("0,0.5,0.5,0.1,0.1", "separate a line's values with spaces, not commas"),
        ("0 0.5 0.5 0.1 0.1,", "separate a line's values with spaces, not commas"),
        ("# a comment", "each value is a number (class cx cy w h ...)"),
    ],
)
def test_a_label_line_that_is_not_numbers_says_how_to_write_it(
    line: str, fix: str, tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """Was "non-numeric value in '0,0.5,...'" without the fix (a CSV export, a comment)."""
    data = _dataset(tmp_path, write_image, BASE, {"x": f"{line}\n"})
    said = rf"x\.txt:1: non-numeric value in .*; {re.escape(fix)}"
    with pytest.raises(DataFormatError, match=said):
        read_yolo(data, "train", task="detect")


@pytest.mark.parametrize("names", ["[a, null]", "\n  - a\n  -\n", "\n  0: a\n  1: ~\n"])
def test_an_empty_class_name_is_refused_naming_the_class(
    names: str, tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """A blank entry of ``names`` trained as a class named 'None', unsaid."""
    yaml = "path: .\ntrain: images/train\nnames: " + names.lstrip(" ") + "\n"
    data = _dataset(tmp_path, write_image, yaml, {"x": "0 0.5 0.5 0.1 0.1\n"})
    with pytest.raises(DataFormatError, match=r"data.yaml: 'names' has an empty entry \(class 1\)"):
        read_yolo(data, "train", task="detect")


def _dataset(
    tmp_path: Path, write_image: Callable[..., Path], yaml: str, labels: dict[str, str | None]
) -> Path:
    (tmp_path / "data.yaml").write_text(yaml)
    for name, text in labels.items():
        write_image(tmp_path / "images" / "train" / f"{name}.png", width=100, height=50)
        if text is not None:
            lbl = tmp_path / "labels" / "train" / f"{name}.txt"
            lbl.parent.mkdir(parents=True, exist_ok=True)
            lbl.write_text(text)
    return tmp_path / "data.yaml"


BASE = "path: .\ntrain: images/train\nnames: [a, b]\n"


@pytest.mark.parametrize(
    ("task", "line", "check"),
    [
        ("detect", "1 0.5 0.5 0.2 0.4\n", lambda t: np.allclose(t.boxes, [[40, 15, 60, 35]])),
        (
            "segment",
            "0 0.1 0.2 0.3 0.2 0.3 0.6\n",
            lambda t: np.allclose(t.boxes, [[10, 10, 30, 30]]),
        ),
        (
            "obb",
            "0 0.1 0.2 0.3 0.2 0.3 0.6 0.1 0.6\n",
            lambda t: (
                np.allclose(t.rboxes, [[20, 20, 20, 20, 0]], atol=1e-5)
                or np.allclose(t.rboxes[:, :4], [[20, 20, 20, 20]])
            ),
        ),
    ],
)
def test_label_lines_are_denormalised_per_task(
    tmp_path: Path,
    write_image: Callable[..., Path],
    task: Task,
    line: str,
    check: Callable[..., bool],
) -> None:
    """Each task's line format maps to pixel targets of a 100x50 image."""
    data = _dataset(tmp_path, write_image, BASE, {"x": line})
    t = read_yolo(data, "train", task=task).records[0].targets
    assert check(t)


def test_pose_lines_follow_kpt_shape(tmp_path: Path, write_image: Callable[..., Path]) -> None:
    """kpt_shape [2, 3]: box then two (x, y, v) keypoints; v = 0 keypoints are zeroed."""
    yaml = BASE + "kpt_shape: [2, 3]\nflip_idx: [1, 0]\n"
    data = _dataset(tmp_path, write_image, yaml, {"x": "0 0.5 0.5 0.2 0.4 0.5 0.4 2 0.9 0.9 0\n"})
    index = read_yolo(data, "train", task="pose")
    t = index.records[0].targets
    assert t.keypoints is not None
    assert t.keypoint_vis is not None
    np.testing.assert_allclose(t.keypoints[0], [[50, 20], [0, 0]])
    assert t.keypoint_vis[0].tolist() == [2, 0]
    assert index.schema.flip_index == (1, 0)


def test_a_detect_read_takes_segment_and_pose_lines_as_their_boxes_and_counts_them(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """As the authors' loader reads a segment or pose set for a box task: a polygon's enclosing
    box, a pose line's box without its keypoints (``5 + K * D`` values); a line of another
    length is still refused."""
    yaml = BASE + "kpt_shape: [2, 3]\n"
    lines = "0 0.1 0.2 0.3 0.2 0.3 0.6\n1 0.5 0.5 0.2 0.4 0.5 0.4 2 0.9 0.9 0\n0 0.5 0.5 0.2 0.4\n"
    index = read_yolo(_dataset(tmp_path, write_image, yaml, {"x": lines}), "train", task="detect")
    t = index.records[0].targets
    np.testing.assert_allclose(t.boxes, [[10, 10, 30, 30], [40, 15, 60, 35], [40, 15, 60, 35]])
    assert t.labels.tolist() == [0, 1, 0]
    assert index.report.counts == {
        "polygon (segment outline or OBB corners) read as its enclosing box (task detect)": 1,
        "pose line read as its box, keypoints dropped (task detect)": 1,
    }
    (tmp_path / "bad").mkdir()
    bad = _dataset(tmp_path / "bad", write_image, BASE, {"x": "0 0.5 0.5 0.2 0.4 0.9\n"})
    with pytest.raises(DataFormatError, match=r"x.txt:1: expected 5 values for task 'detect'"):
        read_yolo(bad, "train", task="detect")


@pytest.mark.parametrize(
    ("task", "yaml_extra", "line", "match"),
    [
        (
            "detect",
            "",
            "0 0.5 1.2 0.1 0.1",
            r"x.txt:2: value 1.2 is outside \[0, 1\].*divide x by the width",
        ),
        ("detect", "", "0 0.5 -0.02 0.1 0.1", r"x.txt:2: value -0.02 is outside \[0, 1\] by more"),
        (
            "segment",
            "",
            "0 0.1 0.1 0.2 0.2",
            r"x.txt:2: a segment line needs a class and at least 3 x y points",
        ),
        (
            "pose",
            "kpt_shape: [2, 3]\n",
            "0 0.5 0.5 0.1 0.1 0.5 0.5 2",
            r"x.txt:2: expected 11 values.*kpt_shape \[2, 3\]",
        ),
        ("detect", "", "5 0.5 0.5 0.1 0.1", r"x.txt:2: class 5 is not an index 0..1"),
        ("obb", "", "0 0.1 0.1 0.2 0.2", r"x.txt:2: expected 9 values for task 'obb'"),
    ],
)
def test_bad_label_lines_name_the_file_and_line(
    tmp_path: Path,
    write_image: Callable[..., Path],
    task: Task,
    yaml_extra: str,
    line: str,
    match: str,
) -> None:
    """A bad value is refused with file:line and what to do (one outside [0, 1] by more than
    the authors' 0.01)."""
    first = {
        "detect": "0 0.5 0.5 0.1 0.1",
        "segment": "0 0.1 0.1 0.2 0.2 0.3 0.1",
        "obb": "0 0.1 0.1 0.2 0.1 0.2 0.2 0.1 0.2",
        "pose": "0 0.5 0.5 0.1 0.1 0.5 0.5 2 0.5 0.5 2",
    }[task]
    data = _dataset(tmp_path, write_image, BASE + yaml_extra, {"x": f"{first}\n{line}\n"})
    with pytest.raises(DataFormatError, match=match):
        read_yolo(data, "train", task=task)


@pytest.mark.parametrize(
    ("task", "line", "boxes"),
    [
        ("detect", "0 1.004 0.5 0.02 0.1", [[99.4, 22.5, 100, 27.5]]),  # cx past the edge
        ("detect", "0 0.995 0.5 0.02 0.1", [[98.5, 22.5, 100, 27.5]]),  # in range, box spills
        ("segment", "0 -0.005 0.1 0.5 0.1 0.5 0.5", [[0, 5, 50, 25]]),
        ("pose", "0 0.5 0.5 0.2 0.2 1.008 0.5 2 0.5 0.5 2", [[40, 20, 60, 30]]),
    ],
)
def test_values_within_the_authors_slack_of_the_unit_range_are_clipped_and_counted(
    tmp_path: Path, write_image: Callable[..., Path], task: Task, line: str, boxes: list[float]
) -> None:
    """An exporter's rounding (up to 0.01 outside [0, 1]) is read as the authors' loader reads
    it: the instance clipped to the image, counted; a box that spills over the edge is clipped."""
    extra = "kpt_shape: [2, 3]\n" if task == "pose" else ""
    data = _dataset(tmp_path, write_image, BASE + extra, {"x": line})
    index = read_yolo(data, "train", task=task)
    targets = index.records[0].targets
    np.testing.assert_allclose(targets.boxes, boxes, atol=1e-4)
    counted = index.report.counts.get("label values at most 0.01 outside [0, 1]: clipped", 0)
    assert counted == (0 if "0.995" in line else 1)
    if task == "segment":
        assert targets.polygons is not None and targets.polygons[0][:, 0].min() == 0
    if task == "pose":
        assert targets.keypoints is not None and targets.keypoints[0, 0, 0] == 100


@pytest.mark.parametrize(
    ("task", "lines", "kept"),
    [
        ("detect", ["0 0.5 0.5 0.2 0.2"] * 3 + ["1 0.5 0.5 0.2 0.2"], 2),
        ("pose", ["0 0.5 0.5 0.2 0.2 0.5 0.5 2 0.4 0.4 1"] * 2, 1),
        # another ring of the same box is another object
        ("segment", ["0 .1 .1 .5 .1 .5 .5", "0 .1 .1 .5 .5 .1 .5", "0 .1 .1 .5 .1 .5 .5"], 2),
        ("obb", ["0 0.1 0.1 0.2 0.1 0.2 0.2 0.1 0.2"] * 2, 1),
    ],
)  # fmt: skip
def test_a_label_line_repeating_an_earlier_one_is_dropped_and_counted(
    tmp_path: Path, write_image: Callable[..., Path], task: Task, lines: list[str], kept: int
) -> None:
    """Was: kept, so a pasted line trained twice and a val object counted twice; the authors'
    reader drops such rows and warns."""
    extra = "kpt_shape: [2, 3]\n" if task == "pose" else ""
    data = _dataset(tmp_path, write_image, BASE + extra, {"x": "\n".join(lines) + "\n"})
    index = read_yolo(data, "train", task=task)
    assert len(index.records[0].targets) == kept
    assert index.report.counts == {DUPLICATE_LINE: len(lines) - kept}


def test_an_obb_quad_on_one_line_is_an_empty_box_skipped_and_counted(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """Was: kept as a rotated box 0 (or 3e-14) px wide, unsaid; a detect box without area is
    skipped and counted, and so is this."""
    lines = "0 0.5 0.5 0.5 0.5 0.5 0.5 0.5 0.5\n0 0.1 0.1 0.3 0.3 0.6 0.6 0.9 0.9\n"
    lines += "1 0.1 0.1 0.2 0.1 0.2 0.2 0.1 0.2\n"
    index = read_yolo(_dataset(tmp_path, write_image, BASE, {"x": lines}), "train", task="obb")
    targets = index.records[0].targets
    assert targets.labels.tolist() == [1] and targets.rboxes is not None
    assert index.report.counts == {"empty box (zero width or height)": 2}
    assert index.report.examples["empty box (zero width or height)"][0].endswith("x.txt:1")


def test_keypoint_visibility_between_the_codes_reads_as_labelled_and_is_counted(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """Was: rounded, so 0.5 became 0 and the keypoint was dropped unsaid; the authors' loss and
    metrics take any non-zero visibility as labelled. Outside [0, 2] it is refused, naming it."""
    yaml = BASE + "kpt_shape: [3, 3]\nflip_idx: [0, 1, 2]\n"
    line = "0 0.5 0.5 0.2 0.4 0.5 0.4 0.5 0.6 0.4 1.4 0.7 0.4 2\n"
    index = read_yolo(_dataset(tmp_path, write_image, yaml, {"x": line}), "train", task="pose")
    t = index.records[0].targets
    assert t.keypoint_vis is not None and t.keypoint_vis[0].tolist() == [1, 2, 2]
    assert index.report.counts == {"keypoint visibility not 0, 1 or 2: read as labelled (not 0)": 1}
    (tmp_path / "bad").mkdir()
    bad = _dataset(tmp_path / "bad", write_image, yaml, {"x": line.replace(" 2\n", " 3\n")})
    with pytest.raises(DataFormatError, match=r"x.txt:1: keypoint visibility 3; it must be 0"):
        read_yolo(bad, "train", task="pose")


def test_label_files_beside_their_images_are_named_with_the_folder_to_move_them_to(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """Was "label file missing ... read with missing_labels='background'": the fix offered
    would have trained every image as a background, its labels lying beside it unread."""
    data = _dataset(tmp_path, write_image, BASE, {"x": None})
    (tmp_path / "images" / "train" / "x.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    said = (
        r"labels/train/x.txt: label file missing for .*x.png, and x.txt lies beside the image; "
        r"YOLO reads labels from the 'labels' folder beside 'images': move the .txt files of "
        r".*images/train to .*labels/train"
    )
    with pytest.raises(DataFormatError, match=said):
        read_yolo(data, "train", task="detect")


def test_missing_label_file_differs_from_an_empty_one(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """Empty file = background; missing file = error by default, or a counted skip / background."""
    data = _dataset(tmp_path, write_image, BASE, {"empty": "", "missing": None})
    with pytest.raises(
        DataFormatError, match=r"missing.txt: label file missing.*An empty file marks a background"
    ):
        read_yolo(data, "train", task="detect")
    skipped = read_yolo(data, "train", task="detect", missing_labels="skip")
    assert [r.path.stem for r in skipped.records] == ["empty"]
    assert len(skipped.records[0].targets) == 0
    assert skipped.report.counts == {"missing label file (image skipped)": 1}
    kept = read_yolo(data, "train", task="detect", missing_labels="background")
    assert len(kept) == 2
    assert kept.report.total == 1


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_coco_to_yolo_txt_round_trip_gives_equal_targets(
    tmp_path: Path, small_synthetic: Callable[[Task], Path], task: Task
) -> None:
    """COCO → Targets → YOLO txt → Targets is equal within 1e-3 px for every task."""
    root = small_synthetic(task)
    splits = {
        s: read_coco(root / "annotations" / f"{s}.json", root / "images" / s, task=task)
        for s in ("train", "val")
    }
    data = write_yolo(splits, tmp_path / "yolo")
    for split, coco_index in splits.items():
        yolo_index = read_yolo(data, split, task=task)
        assert yolo_index.schema.class_names == coco_index.schema.class_names
        assert yolo_index.schema.flip_index == coco_index.schema.flip_index
        assert len(yolo_index) == len(coco_index)
        for a, b in zip(coco_index.records, yolo_index.records, strict=True):
            assert (a.width, a.height) == (b.width, b.height)
            assert a.targets.allclose(b.targets, atol=1e-3), (task, a.path)


def test_synthetic_command_exports_yolo_txt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m lucid_train.data.builtin_sets --yolo OUT`` writes a readable
    data.yaml."""
    cache, out = str(tmp_path / "cache"), str(tmp_path / "y")
    synthetic_main(
        ["--task", "pose", "--cache", cache, "--yolo", out, "--num-train", "3", "--num-val", "2"]
    )
    assert len(read_yolo(tmp_path / "y" / "data.yaml", "val", task="pose")) == 2
    assert "data.yaml" in capsys.readouterr().out


def test_a_box_past_the_image_is_clipped_and_counted_once(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """On a 100x50 image: a box whose right half reaches 10 px past the edge is clipped and
    counted; one within the image is not."""
    data = _dataset(tmp_path, write_image, BASE, {"x": "0 0.95 0.5 0.3 0.2\n0 0.5 0.5 0.2 0.2\n"})
    index = read_yolo(data, "train", task="detect")
    np.testing.assert_allclose(
        index.records[0].targets.boxes, [[80, 20, 100, 30], [40, 20, 60, 30]]
    )
    assert index.report.counts == {"box more than 1 px outside the image: clipped to it": 1}


@pytest.mark.parametrize("missing", ["error", "skip", "background"])
def test_a_folder_in_place_of_a_label_file_is_refused_naming_it(
    tmp_path: Path, write_image: Callable[..., Path], missing: MissingLabels
) -> None:
    """A folder where ``a.txt`` should be is not a missing label file: it is refused, naming it,
    rather than reported as missing, skipped or read as a background image."""
    data = _dataset(tmp_path, write_image, BASE, {"a": None, "b": "0 0.5 0.5 0.2 0.2\n"})
    (tmp_path / "labels" / "train" / "a.txt").mkdir()
    with pytest.raises(DataFormatError, match=r"a.txt: a folder where the label file of .*a.png"):
        read_yolo(data, "train", task="detect", missing_labels=missing)
