"""`benchmarks/seed_curves.py` draws both trainers' curves from `peer_detect.py` results: each
seed's epochs in order, the warm-up marker (epoch 0) left out, and a PNG written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import seed_curves


def _seed(folder: Path, seed: int, ours: list[float], theirs: list[float]) -> None:
    log = [{"epoch": 0, "t_s": 1.0, "note": "first batch"}]
    doc = {
        "ours_arms": {"auto": {"epoch_log": log + [
            {"epoch": e + 1, "nms_box": v} for e, v in enumerate(ours)]}},
        "peer": {"epoch_log": log + [{"epoch": e + 1, "nms_box": v} for e, v in enumerate(theirs)]},
    }  # fmt: skip
    (folder / f"seed{seed}").mkdir(parents=True)
    (folder / f"seed{seed}" / "peer_detect.json").write_text(json.dumps(doc))


def test_the_curves_of_each_seed_are_read_in_epoch_order_and_drawn(tmp_path: Path) -> None:
    _seed(tmp_path, 0, [0.1, 0.2, 0.3], [0.1, 0.15, 0.25])
    _seed(tmp_path, 1, [0.0, 0.1, 0.2], [0.05, 0.2, 0.3])
    ours, theirs = seed_curves.curves(tmp_path)
    assert ours == {0: [0.1, 0.2, 0.3], 1: [0.0, 0.1, 0.2]}
    assert theirs[1] == [0.05, 0.2, 0.3]
    out = tmp_path / "curves.png"
    seed_curves.main([str(tmp_path), "--out", str(out)])
    assert Image.open(out).size == (900, 560)
