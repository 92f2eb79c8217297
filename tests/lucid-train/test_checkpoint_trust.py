"""Checkpoints load without running code from them, a bad one is named in one line (with the
last good one beside it), and every file of a run is written whole or not at all."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from lucid_train.atomic_files import write_text
from lucid_train.cli import main
from lucid_train.report.metrics_log import MetricsWriter, read_rows
from lucid_train.report.training_curves import plot_curves
from lucid_train.run.checkpoint_io import AtomicCheckpointIO
from lucid_train.weights.checkpoint_file import (
    CheckpointError,
    load_checkpoint_file,
    read_checkpoint_info,
)


class _Planted:
    """Unpickling this calls ``os.system``: the shape of a shared, malicious checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def _plant(path: Path, marker: Path) -> Path:
    # A lucid-looking checkpoint: the task and model are there, so only the refusal stops it.
    torch.save(
        {"hyper_parameters": {"task": "detect", "model": "yolo26n"}, "payload": _Planted(marker)},
        path,
    )
    return path


def _lucid_checkpoint(path: Path, epoch: int) -> Path:
    torch.save(
        {
            "epoch": epoch,
            "hyper_parameters": {"task": "detect", "model": "yolo26n", "class_names": ("a",)},
            "state_dict": {"w": torch.arange(4.0)},
        },
        path,
    )
    return path


VERBS = {
    "predict": ["predict", "--ckpt", "{ckpt}", "--source", "{tmp}"],
    "validate": ["validate", "--ckpt", "{ckpt}"],
    "export": ["export", "--ckpt", "{ckpt}"],
    "resume": ["fit", "--ckpt_path", "{ckpt}"],
}


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_a_plain_pickle_is_refused_unread_as_such(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: torch's warning about the pickle protocol, then "truncated or corrupt"."""
    import pickle

    marker = tmp_path / "ran"
    ckpt = tmp_path / "shared.pt"
    ckpt.write_bytes(pickle.dumps({"payload": _Planted(marker)}, protocol=4))
    argv = [a.format(ckpt=ckpt, tmp=tmp_path) for a in VERBS[verb]]
    assert main(argv) == 2
    assert not marker.exists(), "code from the checkpoint ran"
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{ckpt} is a plain pickle" in err and "refused unread" in err


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_a_checkpoint_that_would_run_code_is_refused_before_any_of_it_runs(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    ckpt = _plant(tmp_path / "shared.ckpt", marker)
    argv = [a.format(ckpt=ckpt, tmp=tmp_path) for a in VERBS[verb]]
    assert main(argv) == 2
    assert not marker.exists(), "code from the checkpoint ran"
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(ckpt) in err and "refused" in err and "posix.system" in err


def test_the_trainer_resume_path_refuses_it_too(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    ckpt = _plant(tmp_path / "shared.ckpt", marker)
    with pytest.raises(CheckpointError, match="refused"):
        AtomicCheckpointIO().load_checkpoint(ckpt, weights_only=False)  # asked unsafe: still not
    assert not marker.exists()


def test_a_lucid_checkpoint_reads_with_its_epoch(tmp_path: Path) -> None:
    info = read_checkpoint_info(_lucid_checkpoint(tmp_path / "last.ckpt", 3))
    assert (info.task, info.model, info.epoch) == ("detect", "yolo26n", 3)
    assert info.hyper_parameters["class_names"] == ("a",)


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage"])
def test_a_bad_checkpoint_is_named_with_the_last_good_one(
    damage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    good = _lucid_checkpoint(folder / "best.ckpt", 4)
    bad = _lucid_checkpoint(folder / "last.ckpt", 5)
    data = bad.read_bytes()
    garbage = b"not a checkpoint\n" * 9
    damaged = {"truncated": data[: len(data) // 2], "empty": b"", "garbage": garbage}
    bad.write_bytes(damaged[damage])
    with pytest.raises(CheckpointError) as err:
        load_checkpoint_file(bad)
    text = str(err.value)
    assert f"checkpoint {bad} is truncated or corrupt" in text
    if damage == "garbage":  # its first bytes, not the unpickler's KeyError
        assert "(it begins b'not a checkp', neither a zip archive nor a pickle" in text
    assert f"the last good checkpoint there is {good} (epoch 4)" in text

    assert main(["predict", "--ckpt", str(bad), "--source", str(tmp_path)]) == 2
    line = capsys.readouterr().err.strip()
    assert len(line.splitlines()) == 1 and str(bad) in line and str(good) in line


def test_a_bad_checkpoint_alone_says_to_start_again(tmp_path: Path) -> None:
    bad = tmp_path / "last.ckpt"
    bad.write_bytes(b"PK\x03\x04 not a whole zip")
    with pytest.raises(CheckpointError, match="no other checkpoint in that folder reads"):
        read_checkpoint_info(bad)


def _disk_full_midway(path: Any) -> None:
    Path(path).write_bytes(b"half a file")
    raise OSError(errno.ENOSPC, "No space left on device")


def _no_temporaries(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if ".tmp" in p.name]


def test_a_checkpoint_write_that_fails_midway_leaves_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    io = AtomicCheckpointIO()
    last = tmp_path / "last.ckpt"
    io.save_checkpoint({"epoch": 1, "w": torch.ones(3)}, last)
    monkeypatch.setattr(torch, "save", lambda obj, f, *a, **k: _disk_full_midway(f))
    with pytest.raises(OSError, match="No space"):
        io.save_checkpoint({"epoch": 2, "w": torch.zeros(3)}, last)
    monkeypatch.undo()
    assert io.load_checkpoint(last)["epoch"] == 1
    _no_temporaries(tmp_path)


def test_a_checkpoint_whose_pickling_raises_leaves_the_previous_one(tmp_path: Path) -> None:
    class Unpicklable:
        def __reduce__(self) -> Any:
            raise RuntimeError("cannot pickle this")

    io = AtomicCheckpointIO()
    last = tmp_path / "last.ckpt"
    io.save_checkpoint({"epoch": 1}, last)
    with pytest.raises(RuntimeError, match="cannot pickle"):
        io.save_checkpoint({"epoch": 2, "w": torch.ones(10_000), "x": Unpicklable()}, last)
    assert io.load_checkpoint(last)["epoch"] == 1
    _no_temporaries(tmp_path)


def test_a_plot_write_that_fails_midway_leaves_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    png = plot_curves({"train/loss": [(0, 1.0), (1, 0.5)]}, tmp_path / "losses.png")
    before = png.read_bytes()
    monkeypatch.setattr(Image.Image, "save", lambda self, fp, *a, **k: _disk_full_midway(fp))
    with pytest.raises(OSError, match="No space"):
        plot_curves({"train/loss": [(0, 1.0), (1, 0.5), (2, 0.2)]}, png)
    assert png.read_bytes() == before
    _no_temporaries(tmp_path)


def test_a_text_write_that_fails_midway_leaves_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """predictions.json, results files, config.yaml: `write_text` is whole or nothing."""
    target = write_text(tmp_path / "predictions.json", "[1]")
    monkeypatch.setattr(Path, "write_text", lambda self, *a, **k: _disk_full_midway(self))
    with pytest.raises(OSError, match="No space"):
        write_text(target, "[1, 2]")
    assert target.read_text() == "[1]"
    _no_temporaries(tmp_path)


def test_metrics_csv_survives_a_failed_rewrite_and_a_partial_last_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = MetricsWriter(tmp_path)
    writer.log_metrics({"epoch": 0, "train/loss": 1.5}, step=0)
    writer.save()
    before = (tmp_path / "metrics.csv").read_bytes()
    writer.log_metrics({"epoch": 0, "val/mAP50-95": 0.1}, step=0)  # a new column: rewrite

    def full_after_the_header(self: Any, rows: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(
        "lucid_train.report.metrics_log.csv.DictWriter.writerows", full_after_the_header
    )
    with pytest.raises(OSError):
        writer.save()
    monkeypatch.undo()
    assert (tmp_path / "metrics.csv").read_bytes() == before
    _no_temporaries(tmp_path)

    with (tmp_path / "metrics.csv").open("a") as f:
        f.write("1,1,0.7")  # a run killed mid-append
    columns, rows = read_rows(tmp_path / "metrics.csv")
    assert columns == ["epoch", "step", "train/loss"]
    assert rows == [{"epoch": "0", "step": "0", "train/loss": "1.5"}]


def test_a_resumed_run_keeps_the_rows_before_its_epoch_and_drops_the_rest(tmp_path: Path) -> None:
    first = MetricsWriter(tmp_path)
    for step, epoch in enumerate([0, 0, 1, 1, 2]):
        first.log_metrics({"epoch": epoch, "train/loss": float(step)}, step=step)
    first.save()
    resumed = MetricsWriter(tmp_path, resume_epoch=2)
    resumed.log_metrics({"epoch": 2, "train/loss": 9.0, "val/x": 1.0}, step=4)
    resumed.save()
    rows = read_rows(tmp_path / "metrics.csv")[1]
    assert [r["step"] for r in rows] == ["0", "1", "2", "3", "4"]
    assert rows[-1]["train/loss"] == "9.0"  # the killed run's epoch 2, logged again


def test_a_run_resumed_from_an_epochs_end_keeps_that_epochs_row(tmp_path: Path) -> None:
    """Was: a resume from ``best.ckpt`` (epoch 0's validation end, so it resumes at epoch 1)
    deleted epoch 0's row, which it never ran again."""
    first = MetricsWriter(tmp_path)
    for step, epoch in enumerate([0, 1, 2]):
        first.log_metrics({"epoch": epoch, "val/x": float(step)}, step=step)
    first.save()
    resumed = MetricsWriter(tmp_path, resume_epoch=0)  # best.ckpt's count
    assert len(read_rows(tmp_path / "metrics.csv")[1]) == 3  # nothing dropped before it logs
    resumed.log_metrics({"epoch": 1, "val/x": 7.0}, step=1)
    resumed.save()
    rows = read_rows(tmp_path / "metrics.csv")[1]
    assert [(r["epoch"], r["val/x"]) for r in rows] == [("0", "0.0"), ("1", "7.0")]


def test_a_resume_says_when_it_drops_a_cut_short_metrics_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: a metrics.csv whose last row was cut short lost that row on resume, unsaid."""
    first = MetricsWriter(tmp_path)
    for step in range(2):
        first.log_metrics({"epoch": step, "train/loss": 1.5}, step=step)
    first.save()
    with (tmp_path / "metrics.csv").open("a") as f:
        f.write("2,2,0.7")  # a row cut mid-write
    MetricsWriter(tmp_path, resume_epoch=2)
    err = capsys.readouterr().err
    assert "metrics.csv: dropped 1 unreadable row (cut short" in err and "kept 2" in err
    MetricsWriter(tmp_path, resume_epoch=2)  # whole rows only now: nothing said
    assert capsys.readouterr().err == ""


def test_a_run_resumed_at_epoch_zero_logs_epoch_zero_once(tmp_path: Path) -> None:
    """Was: a run killed in epoch 1 before that epoch's last.ckpt was written resumes at
    epoch 0, whose new rows (the integer epoch 0, read as no epoch) left the cut pending, so
    metrics.csv held epoch 0 twice, the killed run's rows and the resumed run's."""
    first = MetricsWriter(tmp_path)
    first.log_metrics({"epoch": 0, "train/loss": 1.0}, step=2)
    first.save()
    resumed = MetricsWriter(tmp_path, resume_epoch=0)
    resumed.log_metrics({"epoch": 0, "train/loss": 2.0}, step=2)
    resumed.save()
    resumed.log_metrics({"epoch": 1, "train/loss": 3.0}, step=5)
    resumed.save()
    rows = read_rows(tmp_path / "metrics.csv")[1]
    assert [(r["epoch"], r["train/loss"]) for r in rows] == [("0", "2.0"), ("1", "3.0")]


def test_an_export_that_fails_midway_leaves_the_previous_onnx(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lucid_models import build_model, export_onnx

    out = tmp_path / "model.onnx"
    out.write_bytes(b"the previous export")

    def failing_export(model: Any, args: Any, f: Any, **kwargs: Any) -> None:
        _disk_full_midway(f)

    monkeypatch.setattr(torch.onnx, "export", failing_export)
    with pytest.raises(OSError, match="No space"):
        export_onnx(build_model("yolo26n", num_classes=2), out, image_size=(64, 64))
    assert out.read_bytes() == b"the previous export"
    _no_temporaries(tmp_path)


def test_a_folder_given_as_a_checkpoint_names_the_checkpoints_it_holds(tmp_path: Path) -> None:
    """A run folder passed to --ckpt (or --model.weights) is told which files to pass, not
    "no such file"; a folder without any says where a run keeps them."""
    run = tmp_path / "train"
    (run / "checkpoints").mkdir(parents=True)
    last = _lucid_checkpoint(run / "checkpoints" / "last.ckpt", 2)
    with pytest.raises(
        CheckpointError, match=re.escape(f"is a folder; pass one of its files: {last}")
    ):
        load_checkpoint_file(run)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match=r"no \.ckpt in it"):
        load_checkpoint_file(empty)


def test_a_file_named_as_another_kind_is_not_called_a_damaged_checkpoint(tmp_path: Path) -> None:
    """``--ckpt data.yaml`` is told it is no checkpoint; a damaged ``.ckpt`` keeps its
    "truncated or corrupt" with the last good one beside it (above)."""
    _lucid_checkpoint(tmp_path / "best.ckpt", 1)
    data = tmp_path / "data.yaml"
    data.write_text("path: .\ntrain: images/train\n")
    with pytest.raises(CheckpointError) as err:
        load_checkpoint_file(data)
    assert "is not a checkpoint (a .yaml file)" in str(err.value)
    assert "truncated" not in str(err.value) and "last good" not in str(err.value)
