"""`benchmarks/validation_scale.py`: the repeated val split is the source split, copy after copy,
under new names and ids, so the validation it times scores the same images and boxes N times."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lucid_testing.benchmark_scripts import load_benchmark


def _source(root: Path) -> None:
    (root / "annotations").mkdir(parents=True)
    (root / "images" / "val").mkdir(parents=True)
    for name in ("a.jpg", "b.jpg"):
        (root / "images" / "val" / name).write_bytes(name.encode())
    doc = {
        "images": [{"id": 7, "file_name": "a.jpg", "width": 8, "height": 8},
                   {"id": 9, "file_name": "b.jpg", "width": 8, "height": 8}],
        "annotations": [{"id": 1, "image_id": 7, "category_id": 1, "bbox": [1, 1, 2, 2]},
                        {"id": 2, "image_id": 7, "category_id": 2, "bbox": [3, 3, 2, 2]},
                        {"id": 3, "image_id": 9, "category_id": 1, "bbox": [0, 0, 4, 4]}],
        "categories": [{"id": 1, "name": "x"}, {"id": 2, "name": "y"}],
    }  # fmt: skip
    (root / "annotations" / "val.json").write_text(json.dumps(doc))


def test_a_repeated_split_holds_every_copy_under_its_own_ids(tmp_path: Path) -> None:
    scale = load_benchmark("validation_scale")
    _source(tmp_path / "src")
    out = scale.repeated_split(tmp_path / "src", tmp_path / "work", 5)
    doc = json.loads((out / "annotations" / "val.json").read_text())
    names = [im["file_name"] for im in doc["images"]]
    assert names == ["r0_a.jpg", "r0_b.jpg", "r1_a.jpg", "r1_b.jpg", "r2_a.jpg"]
    assert [im["id"] for im in doc["images"]] == [1, 2, 3, 4, 5]
    assert [(a["id"], a["image_id"], a["bbox"]) for a in doc["annotations"]] == [
        (1, 1, [1, 1, 2, 2]), (2, 1, [3, 3, 2, 2]), (3, 2, [0, 0, 4, 4]),
        (4, 3, [1, 1, 2, 2]), (5, 3, [3, 3, 2, 2]), (6, 4, [0, 0, 4, 4]),
        (7, 5, [1, 1, 2, 2]), (8, 5, [3, 3, 2, 2]),
    ]  # fmt: skip
    for name in names:
        assert (out / "images" / "val" / name).read_bytes() == name[3:].encode()
    assert (
        doc["categories"]
        == json.loads((tmp_path / "src" / "annotations" / "val.json").read_text())["categories"]
    )


def test_the_phase_timer_splits_the_loop_and_writes_its_parts(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Waiting, steps and the epoch's end add up to the loop's time and land in the JSON file."""
    scale = load_benchmark("validation_scale")
    monkeypatch.setenv(scale.PHASES_ENV, str(tmp_path / "phases.json"))
    clock = iter([0.0, 1.0, 3.0, 3.5, 6.5, 8.0])  # start; batch 1 start, end; batch 2; end
    monkeypatch.setattr(scale.PhaseTimer, "_now", staticmethod(lambda: next(clock)))
    timer = scale.PhaseTimer()
    timer.on_validation_epoch_start(None, None)
    for _ in range(2):
        timer.on_validation_batch_start(None)
        timer.on_validation_batch_end(None)
    timer.on_validation_end(None, None)
    phases = json.loads((tmp_path / "phases.json").read_text())
    assert phases == {"wait_s": 1.5, "step_s": 5.0, "end_s": 1.5, "batches": 2}
