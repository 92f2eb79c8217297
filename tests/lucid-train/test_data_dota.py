"""DOTA labelTxt parsing and tiling: full coverage by windows, the difficult rule for cut objects,
and tiles written in COCO layout that the COCO reader serves."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from lucid_train.data.formats.coco import read_coco
from lucid_train.data.formats.dota import (
    parse_label_txt,
    read_dota,
    tile_dota,
    tile_targets,
    tile_windows,
)
from lucid_train.data.polygons import polygon_area
from lucid_train.data.records import DataFormatError

LABELS = (
    "imagesource:GoogleEarth\ngsd:0.1\n10 10 50 10 50 30 10 30 plane 0\n"
    "100 100 140 100 140 120 100 120 ship 1\n"
)


def test_label_txt_lines_parse_with_headers_skipped() -> None:
    """Corners, class index and difficult flag per line; header lines are ignored."""
    quads, labels, difficult = parse_label_txt(LABELS, ("plane", "ship"), "x.txt")
    assert quads.shape == (2, 4, 2)
    assert labels.tolist() == [0, 1]
    assert difficult.tolist() == [False, True]


def test_unknown_class_names_the_file_line_and_fix() -> None:
    """An unknown class is an error with file:line and how to read other versions."""
    with pytest.raises(DataFormatError, match=r"x.txt:1: class 'car' is not one of .*class_names="):
        parse_label_txt("1 1 2 1 2 2 1 2 car 0\n", ("plane",), "x.txt")


@pytest.mark.parametrize("flag", ["2", "yes", "-1"])
def test_a_difficult_flag_not_0_or_1_is_refused_naming_the_line(flag: str) -> None:
    """Was: read as difficult (left out of the score) without a word."""
    text = f"1 1 9 1 9 9 1 9 plane 0\n1 1 9 1 9 9 1 9 plane {flag}\n"
    with pytest.raises(DataFormatError, match=rf"x.txt:2: difficult flag '{flag}' .* 0 or 1"):
        parse_label_txt(text, ("plane",), "x.txt")
    _, _, difficult = parse_label_txt("1 1 9 1 9 9 1 9 plane 1.0\n", ("plane",), "x.txt")
    assert difficult.tolist() == [True]


@pytest.mark.parametrize(("w", "h"), [(1000, 700), (1024, 1024), (3000, 2100), (1500, 300)])
def test_tile_windows_cover_every_pixel_with_flush_last_windows(w: int, h: int) -> None:
    """Windows lie inside the image, the last ones touch the far edges, the union is everything."""
    wins = tile_windows(w, h, patch=1024, overlap=200)
    covered = np.zeros((h, w), bool)
    for x0, y0, x1, y1 in wins:
        assert 0 <= x0 < x1 <= w
        assert 0 <= y0 < y1 <= h
        assert x1 - x0 <= 1024
        covered[y0:y1, x0:x1] = True
    assert covered.all()


def test_cut_objects_below_the_kept_fraction_become_difficult() -> None:
    """Kept fraction U < 0.7: difficult and refitted to the kept part; U >= 0.7: kept whole."""
    quads = np.array(
        [
            [[90, 0], [110, 0], [110, 10], [90, 10]],  # half inside window (0..100): U = 0.5
            [[10, 0], [30, 0], [30, 10], [10, 10]],  # fully inside
            [[95, 20], [103, 20], [103, 30], [95, 30]],  # U = 5/8 -> difficult
            [[92, 40], [102, 40], [102, 50], [92, 50]],  # U = 0.8 -> kept whole
            [[200, 0], [210, 0], [210, 10], [200, 10]],  # outside
        ],
        np.float64,
    )
    q, labels, difficult = tile_targets(quads, np.arange(5), np.zeros(5, bool), (0, 0, 100, 100))
    assert labels.tolist() == [0, 1, 2, 3]
    assert difficult.tolist() == [True, False, True, False]
    assert polygon_area(q[0]) == pytest.approx(100.0)  # refitted to the 10x10 kept part
    assert polygon_area(q[3]) == pytest.approx(100.0)
    assert q[3][:, 0].max() == pytest.approx(102)


def test_tile_dota_writes_a_coco_layout_the_reader_serves(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """Tiles of a 300x200 image with patch 128 read back as obb records with difficult flags."""
    write_image(tmp_path / "dota" / "train" / "images" / "P0001.png", width=300, height=200)
    (tmp_path / "dota" / "train" / "labelTxt").mkdir(parents=True)
    (tmp_path / "dota" / "train" / "labelTxt" / "P0001.txt").write_text(LABELS)
    index = read_dota(tmp_path / "dota", "train", class_names=("plane", "ship"))
    assert len(index) == 1
    assert index.records[0].targets.difficult.tolist() == [False, True]
    ann = tile_dota(
        tmp_path / "dota",
        "train",
        tmp_path / "tiles",
        patch=128,
        overlap=28,
        class_names=("plane", "ship"),
    )
    tiles = read_coco(ann, tmp_path / "tiles" / "images" / "train", task="obb")
    assert len(tiles) == len(tile_windows(300, 200, 128, 28))
    first = tiles.records[0].targets
    assert first.rboxes is not None
    assert first.labels.tolist() == [0, 1]
    np.testing.assert_allclose(first.rboxes[0, :4], [30, 20, 40, 20], atol=1e-4)


@pytest.mark.parametrize("kind", ["missing", "folder"])
def test_a_label_file_missing_or_a_folder_in_its_place_is_named_as_such(
    kind: str, tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """Both refused (DOTA ships a file per image); a folder in the label file's place was called
    a missing file."""
    write_image(tmp_path / "dota" / "train" / "images" / "P0001.png", width=64, height=64)
    label = tmp_path / "dota" / "train" / "labelTxt" / "P0001.txt"
    label.parent.mkdir(parents=True)
    if kind == "folder":
        label.mkdir()
    said = (
        "a folder stands in place of the label file" if kind == "folder" else "label file missing"
    )
    with pytest.raises(DataFormatError, match=f"P0001.txt: {said} of .*P0001.png"):
        read_dota(tmp_path / "dota", "train", class_names=("plane",))
