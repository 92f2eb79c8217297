"""The harder benchmark sets (assumptions D17): deterministic, and carrying what the built-in
sets lack: many, small and thin objects, class imbalance, mixed aspect ratios, COCO id habits."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from lucid_train.data import SyntheticSpec, read_coco, synthetic_dataset
from lucid_train.data.builtin_sets.hard_scenes import HARD_CATEGORIES

SPEC = SyntheticSpec.hard(num_train=10, num_val=2)


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(root.rglob("*")):
        if f.is_file():
            h.update(f.relative_to(root).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("task", ["detect", "obb", "pose"])
def test_hard_sets_are_a_function_of_the_seed(task: str, tmp_path: Path) -> None:
    a = synthetic_dataset(task, cache_dir=tmp_path / "a", spec=SPEC)  # type: ignore[arg-type]
    b = synthetic_dataset(task, cache_dir=tmp_path / "b", spec=SPEC)  # type: ignore[arg-type]
    c = synthetic_dataset(task, cache_dir=tmp_path / "c", spec=SPEC, seed=1)  # type: ignore[arg-type]
    assert "hard" in a.name and _digest(a) == _digest(b) != _digest(c)


def test_hard_detect_set_has_many_small_thin_imbalanced_objects_and_coco_ids(
    tmp_path: Path,
) -> None:
    root = synthetic_dataset("detect", cache_dir=tmp_path, spec=SPEC)
    doc = json.loads((root / "annotations" / "train.json").read_text())
    ids = [c["id"] for c in doc["categories"]]
    assert ids == [c for c, _ in HARD_CATEGORIES["detect"]] and ids != list(range(1, len(ids) + 1))
    used = [a["category_id"] for a in doc["annotations"]]
    assert ids[-1] not in used  # one category without annotations
    counts = np.bincount([ids.index(c) for c in used], minlength=len(ids))
    assert counts[0] > counts[1] > counts[2] > 0 and counts[3] > 0  # imbalanced, ring present
    assert len(used) / len(doc["images"]) >= 6
    sides = {(im["width"], im["height"]) for im in doc["images"]}
    assert any(w != h for w, h in sides) and len(sides) > 3
    short = {im["id"]: min(im["width"], im["height"]) for im in doc["images"]}
    rel = [max(a["bbox"][2:]) / short[a["image_id"]] for a in doc["annotations"]]
    assert min(rel) < 0.06 < 0.2 < max(rel)  # a few pixels at a 320 canvas, and large ones
    records = read_coco(
        root / "annotations" / "train.json", root / "images" / "train", task="detect"
    )
    assert records.schema.category_ids == tuple(ids) and records.schema.num_classes == len(ids)
