"""The ``lucid`` command turns errors the user can fix into one line on stderr and exit status 2,
before anything trains: a split with no usable image, and a checkpoint file that is not ours."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from lucid_train.cli import main

TINY = ["--data.img_size", "64", "--data.batch_size", "2", "--data.num_workers", "0"]


def _coco_split(root: Path, split: str, *, with_images: bool) -> None:
    doc = {
        "images": [{"id": 1, "file_name": "a.png", "width": 16, "height": 12}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 8, 6]}],
        "categories": [{"id": 1, "name": "cat"}],
    }
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "annotations" / f"{split}.json").write_text(json.dumps(doc))
    (root / "images" / split).mkdir(parents=True)
    if with_images:
        Image.fromarray(np.zeros((12, 16, 3), np.uint8)).save(root / "images" / split / "a.png")


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.slow
def test_fit_on_a_split_with_no_usable_image_stops_before_training_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every train image missing: exit 2 and one line naming the folder and what was looked
    for, and no checkpoint written (today: a Lightning traceback from the dataset)."""
    data = tmp_path / "data"
    _coco_split(data, "train", with_images=False)
    _coco_split(data, "val", with_images=True)
    runs = tmp_path / "runs"
    code = main(["fit", "--data.root", str(data), *TINY, "--trainer.max_epochs", "1",
                 "--run.root", str(runs)])  # fmt: skip
    line = _one_line(capsys.readouterr().err)
    assert code == 2
    assert line.startswith(f"lucid fit: error: {data / 'images' / 'train'}: split 'train' holds")
    assert "no usable image" in line and "train.json" in line and "missing image file" in line
    assert not list(runs.rglob("*.ckpt"))


@pytest.mark.parametrize("verb", ["validate", "predict", "export", "fit"])
def test_a_checkpoint_that_is_not_ours_is_refused_with_one_line_naming_it(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A torch file without lucid's hyper-parameters: exit 2 and one line naming the file and
    the fix, for every verb that reads a checkpoint (resume included)."""
    foreign = tmp_path / "other.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(2)}, "hyper_parameters": {"lr": 0.1}}, foreign)
    argv = {
        "validate": ["validate", "--ckpt", str(foreign)],
        "predict": ["predict", "--ckpt", str(foreign), "--source", str(tmp_path)],
        "export": ["export", "--ckpt", str(foreign)],
        "fit": ["fit", "--ckpt_path", str(foreign), "--run.root", str(tmp_path / "runs")],
    }[verb]
    code = main(argv)
    line = _one_line(capsys.readouterr().err)
    assert code == 2
    assert line.startswith(f"lucid {verb}: error: checkpoint {foreign}: not a lucid checkpoint")
    assert "written by `lucid fit`" in line


@pytest.mark.parametrize(
    ("env", "refused"),
    [
        ({"LOCAL_RANK": "1"}, True),
        ({"RANK": "2", "WORLD_SIZE": "1"}, True),
        ({"LOCAL_RANK": "0"}, False),
        ({"LOCAL_RANK": "1", "WORLD_SIZE": "2"}, False),  # a launcher's rank
    ],
)
def test_a_rank_variable_left_outside_a_launch_is_refused_before_anything_runs(
    env: dict[str, str],
    refused: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Was: `LOCAL_RANK=1 lucid fit` trained as rank 1 of a world of one and ended "done" with
    no metrics.csv, no logs and no run-folder hold."""
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code = main(["validate", "--ckpt", str(tmp_path / "missing.ckpt")])
    line = _one_line(capsys.readouterr().err)
    assert code == 2
    assert ("is set, but this is no data-parallel launch" in line) is refused, line
    if refused:
        key = next(iter(env))
        assert line.startswith(f"lucid validate: error: {key}={env[key]} is set")
        assert f"env -u {key}" in line


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("LUCID_LOSS_ARITHMETIC", "half", "LUCID_LOSS_ARITHMETIC='half': expected 'float32'"),
        ("LUCID_FUSE_BN_SILU", "flase", "LUCID_FUSE_BN_SILU='flase': expected 1 or 0"),
    ],
)
def test_a_switch_of_unknown_value_is_refused_in_one_line(
    name: str, value: str, match: str, tmp_path: Path
) -> None:
    """Read when the packages are imported. Was: a traceback from the import (the loss's
    switch), or the default taken unsaid (only "0" turned the fused BatchNorm off)."""
    env = {**os.environ, name: value, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-m", "lucid_train", "validate", "--ckpt", str(tmp_path / "x.ckpt")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    line = _one_line(done.stderr)
    assert line.startswith(f"lucid validate: error: {match}") and "unset" in line


def test_an_epoch_marks_path_that_cannot_be_a_file_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: the first epoch trained, then an IsADirectoryError traceback."""
    monkeypatch.setenv("LUCID_EPOCH_MARKS", str(tmp_path))
    assert main(["validate", "--ckpt", str(tmp_path / "x.ckpt")]) == 2
    assert _one_line(capsys.readouterr().err).startswith(
        f"lucid validate: error: LUCID_EPOCH_MARKS={tmp_path}: the epochs' marks"
    )
