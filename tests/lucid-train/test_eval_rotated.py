"""Rotated mAP by the DOTA protocol: polygon IoU against hand values, known AP for perfect,
shifted, duplicate and difficult cases, in both AP modes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lucid_train.evaluation import RotatedEvaluator, average_precision, rotated_iou_matrix

GT = np.array([[50, 50, 40, 20, 0.0]])
RIGHT = np.array([200.0, 0, 0, 0, 0])


def test_rotated_iou_matches_hand_values() -> None:
    """Same box 1; shifted by 4 along the long side 36/44; crossed at 90 degrees 1/3; apart 0."""
    cand = np.array(
        [
            [50, 50, 40, 20, 0.0],
            [54, 50, 40, 20, 0.0],
            [50, 50, 40, 20, math.pi / 2],
            [500, 50, 40, 20, 0],
        ]
    )
    np.testing.assert_allclose(
        rotated_iou_matrix(cand, GT)[:, 0], [1, 36 / 44, 1 / 3, 0], atol=1e-9
    )
    far = GT + np.array([1e6, 1e6, 0, 0, 0])
    assert rotated_iou_matrix(far, far + RIGHT / 50)[0, 0] == pytest.approx(36 / 44, abs=1e-9)


def _ev(
    dets: np.ndarray,
    scores: list[float],
    labels: list[int] | None = None,
    difficult: list[bool] | None = None,
    gt: np.ndarray = GT,
    mode: str = "voc07",
) -> dict[str, float]:
    ev = RotatedEvaluator(num_classes=2, ap_mode=mode)  # type: ignore[arg-type]
    ev.add(dets, scores, labels or [0] * len(scores), gt, [0] * len(gt), difficult)
    return ev.compute()


@pytest.mark.parametrize("mode", ["voc07", "area"])
def test_perfect_prediction_scores_one(mode: str) -> None:
    """The ground truth itself: AP 1 at every threshold."""
    out = _ev(GT, [0.9], mode=mode)
    assert out["mAP50"] == pytest.approx(1.0)
    assert out["mAP50_95"] == pytest.approx(1.0)
    assert "AP50/1" not in out  # class without ground truth left out of the mean


def test_shifted_prediction_scores_the_thresholds_it_passes() -> None:
    """IoU 0.818 passes 0.50..0.80: mAP50 1.0, mAP50_95 0.7."""
    out = _ev(GT + RIGHT / 50, [0.9])
    assert out["mAP50"] == pytest.approx(1.0)
    assert out["mAP50_95"] == pytest.approx(0.7)


@pytest.mark.parametrize(("mode", "want"), [("voc07", 0.5), ("area", 0.5)])
def test_false_positive_ranked_first_halves_precision(mode: str, want: float) -> None:
    """FP at 0.9 then TP at 0.8, one GT: precision 0.5 at recall 1 → AP 0.5 in both modes."""
    dets = np.array([[150, 150, 40, 20, 0.0], [50, 50, 40, 20, 0.0]])
    assert _ev(dets, [0.9, 0.8], mode=mode)["mAP50"] == pytest.approx(want)


def test_duplicate_detection_is_a_false_positive() -> None:
    """Two detections on one GT: TP then FP → area AP 1.0 (recall reached at precision 1)."""
    dets = np.vstack([GT, GT])
    assert _ev(dets, [0.9, 0.8], mode="area")["mAP50"] == pytest.approx(1.0)
    half = RotatedEvaluator(num_classes=1, ap_mode="area")
    half.add(dets, [0.9, 0.8], [0, 0], np.vstack([GT, GT + RIGHT]), [0, 0])
    assert half.compute()["mAP50"] == pytest.approx(0.5)


def test_detections_on_difficult_ground_truth_are_ignored() -> None:
    """A match to a difficult GT is neither TP nor FP, and that GT does not count in recall."""
    gt = np.vstack([GT, GT + RIGHT])
    dets = np.vstack([GT + RIGHT, GT])
    ev = RotatedEvaluator(num_classes=1, ap_mode="area")
    ev.add(dets, [0.95, 0.5], [0, 0], gt, [0, 0], [False, True])
    assert ev.compute()["mAP50"] == pytest.approx(1.0)


def test_voc07_is_the_eleven_point_interpolation() -> None:
    """Recall 0.5 at precision 1: 6 of the 11 recall points → 6/11."""
    assert average_precision(np.array([0.5]), np.array([1.0]), "voc07") == pytest.approx(6 / 11)
    assert average_precision(np.array([0.5]), np.array([1.0]), "area") == pytest.approx(0.5)
