"""`Targets` refuses malformed fields at construction; select/concat keep fields aligned."""

from __future__ import annotations

import numpy as np
import pytest

from lucid_train.data.targets import Targets, TargetsError


def _boxes(n: int) -> np.ndarray:
    return np.tile(np.array([[1, 2, 11, 22]], np.float32), (n, 1))


def test_targets_accepts_every_optional_field_with_one_row_per_instance() -> None:
    """A record with rings, rotated boxes and keypoints of matching lengths validates."""
    t = Targets(
        boxes=_boxes(2),
        labels=np.array([0, 1]),
        polygons=(np.zeros((3, 2), np.float32), np.ones((4, 2), np.float32)),
        rboxes=np.zeros((2, 5), np.float32),
        keypoints=np.zeros((2, 5, 2), np.float32),
        keypoint_vis=np.full((2, 5), 2, np.uint8),
    )
    assert len(t) == 2
    assert t.num_keypoints == 5
    assert t.difficult.tolist() == [False, False]


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"boxes": np.zeros((2, 3), np.float32)}, r"boxes: expected shape \(\?, 4\)"),
        ({"boxes": np.zeros((2, 4), np.float64)}, "boxes: expected dtype float32"),
        ({"boxes": np.array([[5, 0, 1, 1]] * 2, np.float32)}, "x1 <= x2"),
        ({"boxes": np.array([[0, 0, np.nan, 1]] * 2, np.float32)}, "non-finite"),
        ({"labels": np.array([0, -1])}, "labels: expected >= 0"),
        ({"labels": np.array([0])}, r"labels: expected shape \(2\)"),
        ({"polygons": (np.zeros((2, 2), np.float32),) * 2}, "at least 3 points"),
        ({"polygons": (np.zeros((3, 2), np.float32),)}, "tuple of 2 rings"),
        ({"rboxes": np.zeros((1, 5), np.float32)}, r"rboxes: expected shape \(2, 5\)"),
        ({"keypoints": np.zeros((2, 3, 2), np.float32)}, "give both or neither"),
        (
            {
                "keypoints": np.zeros((2, 3, 2), np.float32),
                "keypoint_vis": np.full((2, 3), 3, np.uint8),
            },
            "keypoint_vis: expected 0, 1 or 2",
        ),
    ],
)
def test_targets_rejects_malformed_fields_by_name(changes: dict[str, object], match: str) -> None:
    """Every malformed field raises a TargetsError that names it."""
    fields: dict[str, object] = {"boxes": _boxes(2), "labels": np.array([0, 1])}
    fields.update(changes)
    with pytest.raises(TargetsError, match=match):
        Targets(**fields)  # type: ignore[arg-type]


def test_select_and_concat_keep_rows_aligned_across_fields() -> None:
    """Selecting by mask or index moves every field's rows together; concat restores them."""
    t = Targets(
        boxes=np.arange(12, dtype=np.float32).reshape(3, 4) * np.array([1, 1, 2, 2], np.float32),
        labels=np.array([0, 1, 2]),
        difficult=np.array([False, True, False]),
        polygons=tuple(np.full((3, 2), i, np.float32) for i in range(3)),
    )
    a, b = t.select(np.array([True, False, True])), t.select([1])
    assert a.labels.tolist() == [0, 2]
    assert b.difficult.tolist() == [True]
    assert a.polygons is not None
    assert float(a.polygons[1][0, 0]) == 2.0
    back = Targets.concat([a, b]).select([0, 2, 1])
    assert back.allclose(t)


def test_concat_refuses_parts_with_different_fields() -> None:
    """Mixing a polygon record with a box-only record is an error, not a silent drop."""
    with pytest.raises(TargetsError, match="different optional fields"):
        Targets.concat([Targets.empty(polygons=True), Targets.empty()])
