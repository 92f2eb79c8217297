"""`benchmarks/scoring_scale.py`: its synthetic set is scored by the validation's own scorer,
alone and through the evaluator a validation feeds."""

from __future__ import annotations

import json
from pathlib import Path

from lucid_testing.benchmark_scripts import load_benchmark


def test_the_scene_is_seeded_and_its_near_rows_are_hits(tmp_path: Path) -> None:
    """The same seed gives the same rows; a row per (image, detection) with its objects' first
    rows near them, so the mAP is above zero and the JSON holds one row a size."""
    scale = load_benchmark("scoring_scale")
    first = scale.scene(6, 5, 3, 20)
    assert first == scale.scene(6, 5, 3, 20)
    doc, rows = first
    assert len(doc["annotations"]) == 18 and len(rows) == 120
    scale.main(["--out", str(tmp_path), "--images", "4,8", "--classes", "3", "--detections", "10"])
    out = json.loads((tmp_path / "scoring-scale.json").read_text())
    assert [r["images"] for r in out["rows"]] == [4, 8]
    assert all(r["mAP50-95"] > 0 and r["detections"] == 10 * r["images"] for r in out["rows"])
    # the evaluator's path (arrays an image, then compute) scores the same rows alike
    assert all(r["evaluator_mAP50-95"] == r["mAP50-95"] for r in out["rows"])
    assert all(r["add_s"] >= 0 and r["compute_s"] >= 0 for r in out["rows"])
