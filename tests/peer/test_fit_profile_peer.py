"""`benchmarks/fit_profile.py --peer`: the authors' trainer under the same profile window and
summary as a `lucid fit`, so the two fits' device time a batch can be set side by side (issue
34: their m fit's kernels were NHWC, which the step profile's peer side had missed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lucid_testing.benchmark_scripts import load_benchmark
from lucid_train.data import SyntheticSpec, synthetic_dataset


@pytest.mark.slow
def test_the_peer_mode_profiles_the_window_of_the_authors_own_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = load_benchmark("fit_profile")
    peer = load_benchmark("peer_data")
    spec = SyntheticSpec(num_train=8, num_val=2, min_side=96, max_side=128)
    root = synthetic_dataset("detect", cache_dir=tmp_path / "set", spec=spec)
    _, _, peer_yaml = peer.export_for_peer(root, "detect", tmp_path / "yolo")
    for key in ("OUT", "EPOCH", "START", "BATCHES", "STACK"):  # main sets them: restore after
        monkeypatch.setenv(f"LUCID_PROFILE_{key}", "")
    out = tmp_path / "profile"
    argv = ["fit_profile.py", "--out", str(out), "--peer", "--no-stack", "--epoch", "1",
            "--start", "0", "--batches", "1", "--", "model=yolo26n.yaml", f"data={peer_yaml}",
            "epochs=2", "imgsz=64", "batch=4", "workers=0", "device=cpu", "lr0=0.01",
            f"project={tmp_path / 'runs'}", "name=train"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.chdir(tmp_path)
    assert profile.main() == 0
    report = (out / "profile.md").read_text()
    # the first batch of their second epoch (closed at the next batch's start), their ops in it
    assert report.startswith("window: 1 batches"), report[:200]
    assert "aten::conv2d" in report
    assert (out / "trace.json.gz").is_file()
    assert profile._value("lr0", "0.01") == ("lr0", 0.01)
    assert profile._value("epochs", "2") == ("epochs", 2)
    assert profile._value("data", "a.yaml") == ("data", "a.yaml")
