"""``lucid fit`` then ``lucid predict`` as a user runs them: fresh interpreters, a tiny folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lucid_train.data.builtin_sets.synthetic import SyntheticSpec, synthetic_dataset


def _lucid(*args: str, cwd: Path) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "lucid_train", *args],
        cwd=cwd, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    # Lightning's cloud-logger tip and its own torch deprecation are not lucid's to show
    for noise in ("litlogger", "LeafSpec"):
        assert noise not in done.stdout + done.stderr, noise
    return done.stdout


@pytest.mark.slow
def test_fit_then_predict_from_the_command_line(tmp_path: Path) -> None:
    root = synthetic_dataset(
        "detect", cache_dir=tmp_path / "data", spec=SyntheticSpec(8, 4, 96, 128)
    )
    out = _lucid(
        "fit", "--data.root", str(root), "--data.img_size", "64", "--data.batch_size", "4",
        "--data.num_workers", "0", "--trainer.max_epochs", "1", cwd=tmp_path,
    )  # fmt: skip
    assert "best val/mAP50-95 (e2e box)" in out
    run = tmp_path / "runs" / "detect" / "train"
    assert (run / "checkpoints" / "last.ckpt").is_file()
    image = next(p for p in (root / "images" / "val").iterdir())
    _lucid("predict", "--ckpt", str(run / "checkpoints" / "last.ckpt"), "--source", str(image),
           cwd=tmp_path)  # fmt: skip
    doc = json.loads((tmp_path / "runs" / "detect" / "predict" / "predictions.json").read_text())
    assert Path(doc[0]["file"]).name == image.name
