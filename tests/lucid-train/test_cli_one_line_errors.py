"""Every fault a user can fix ends ``lucid`` with one ``lucid <verb>: error: ...`` line and exit
status 2, not a traceback (issue 35): out-of-range flags (refused by their types while parsing),
a run root that cannot be written, a broken ``--config`` file, a checkpoint naming an unknown
model or holding random bytes, a full disk; a bug still shows its traceback."""

from __future__ import annotations

import errno
import importlib.util
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from lucid_testing.cli_flags import overridden
from lucid_train import cli
from lucid_train.atomic_files import atomic_path
from lucid_train.cli.command_errors import error_line
from lucid_train.cli.fit_outcome import done_line, finished_line, resuming_line
from lucid_train.cli.resume import Resume
from lucid_train.errors import DiskFullError
from lucid_train.weights.checkpoint_file import CheckpointInfo

FAST = ["--data.img_size", "64", "--data.batch_size", "2", "--data.num_workers", "0",
        "--trainer.accelerator", "cpu", "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1"]  # fmt: skip


def _one_error_line(err: str, verb: str) -> str:
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if f"lucid {verb}: error: " in line]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--data.batch_size", "0", "PositiveInt"),
        ("--data.batch_size", "-1", "PositiveInt"),
        ("--data.img_size", "100", "multiple of 32"),
        ("--data.img_size", "0", "multiple of 32"),
        ("--data.img_size", "-64", "multiple of 32"),  # was: "expected a whole number"
        ("--data.num_workers", "-1", "NonNegativeInt"),
        ("--trainer.limit_train_batches", "-1", "NonNegativeInt"),
        # was: a fit to its first convolution, then torch's "Input type ... weight type" traceback
        ("--trainer.precision", "64-true", "one of auto, 32-true,"),
    ],
)
def test_an_out_of_range_flag_is_refused_while_parsing(
    flag: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused by the argument's type before any setup (no data is read), in one line naming the
    flag, its value and the range. Was: a ValueError traceback from the data module, then
    jsonargparse's usage block (~60 lines) before its message."""
    with pytest.raises(SystemExit) as stop:
        cli.main(["fit", "--data.root", "/nonexistent", flag, value])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "usage:" not in err and len(err.splitlines()) <= 3, err
    line = _one_error_line(err, "fit")
    assert f"{flag} {value!r} is not " in line and says in line and "pass e.g." in line, line


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--model.nbs", "0"], "nbs (--model.nbs): expected >= 1, got 0"),  # was: ZeroDivision
        (["--model.optimizer", "AdamW", "--model.momentum", "5"],  # was: torch's "beta"
         "momentum (--model.momentum): expected >= 0 and < 1, got 5"),
        (["--model.optimizer", "SGD", "--model.lr0", "-0.01"], "lr0 (--model.lr0): expected > 0"),
        (["--model.weight_decay", "-1"], "weight_decay (--model.weight_decay): expected >= 0"),
        (["--model.warmup_epochs", "-1"], "warmup_epochs (--model.warmup_epochs): expected >= 0"),
        (["--model.max_det", "0"], "max_det (--model.max_det): expected >= 1, got 0"),
        (["--model.loss_capacity", "0"], "loss_capacity (--model.loss_capacity): expected >= 1"),
        (["--trainer.max_epochs", "-5"], "--trainer.max_epochs -5: lucid fit needs the count"),
        # Lightning's "unlimited": was ProgLoss's ValueError traceback at the first epoch
        (["--trainer.max_epochs", "-1", "--trainer.max_steps", "1"],
         "--trainer.max_epochs -1: lucid fit needs the count of epochs"),
        (["--trainer.max_epochs", "null", "--trainer.max_steps", "1"],
         "--trainer.max_epochs null: lucid fit needs the count of epochs"),
        (["--run.name", "../elsewhere"], "--run.name '../elsewhere': expected one folder's name"),
        # was: jsonargparse's "Does not validate against any of the Union subtypes" traceback
        (["--data.augment.mosaic", "2"],
         "mosaic (--data.augment.mosaic): expected a probability in [0, 1], got 2"),
        (["--data.augment.fliplr", "1.5"], "(--data.augment.fliplr): expected a probability"),
        (["--data.augment.hsv_h", "-1"], "hsv_h (--data.augment.hsv_h): expected >= 0, got -1"),
        (["--data.augment.scale", "5"], "(--data.augment.scale): expected >= 0 and < 1"),
        (["--data.augment.close_mosaic", "-1"],
         "close_mosaic (--data.augment.close_mosaic): expected >= 0, got -1"),
        (["--data.augment.fill", "300"], "fill (--data.augment.fill): expected >= 0 and <= 255"),
        (["--seed_everything", "-1"],  # was: Lightning's ValueError traceback after parsing
         "--seed_everything -1: expected a seed from 0 to 4294967295"),
        (["--model", "yolo26n-seg", "--data.task", "detect"],  # was: the parser's link, quoted
         "--data.task: a fit trains its model's task"),
    ],
)  # fmt: skip
def test_a_setting_out_of_its_range_ends_the_fit_with_one_line_naming_it(
    flags: list[str],
    says: str,
    small_synthetic: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused before a step: was a traceback (torch's, Lightning's, a division by zero), or a
    fit that ran on with the value (a negative decay or warm-up, no detections scored, a run
    folder outside --run.root)."""
    root = small_synthetic("detect")
    runs = tmp_path / "runs"
    base = ["--data.root", str(root), *FAST, "--run.root", str(runs)]
    code = cli.main(["fit", *overridden(base, *flags)])  # not a flag given twice (warned of)
    line = _one_error_line(capsys.readouterr().err, "fit")
    assert code == 2 and says in line, line
    assert not (tmp_path / "elsewhere").exists()


def test_a_learning_rate_optimizer_auto_sets_aside_is_said_in_the_log(
    small_synthetic: Callable[[str], Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As the authors' ``optimizer=auto`` ignores lr0 and momentum and says so. Was: dropped
    without a word, and the optimizer's line itself lost to the progress bar's print; now
    Lightning's log (its console handler prints it, as the data pipeline's line)."""
    root = small_synthetic("detect")
    argv = ["fit", "--data.root", str(root), *FAST, "--run.root", str(tmp_path),
            "--model.lr0", "0.5", "--model.momentum", "0.95"]  # fmt: skip
    with caplog.at_level(logging.INFO):
        assert cli.main(argv) == 0
    said = "chosen by optimizer=auto (--model.lr0 0.5 and --model.momentum 0.95 not used"
    assert said in caplog.text


def test_help_shows_the_ranges_types(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["fit", "--help"])
    out = capsys.readouterr().out
    for shown in ("type: ImageSide", "type: PositiveInt", "NonNegativeInt"):
        assert shown in out, shown


def test_an_unwritable_run_root_is_refused_before_training(
    small_synthetic: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """/sys is read-only for every user, root included. Was: mkdir's PermissionError."""
    root = small_synthetic("detect")
    code = cli.main(["fit", "--data.root", str(root), *FAST, "--run.root", "/sys/lucid-runs"])
    line = _one_error_line(capsys.readouterr().err, "fit")
    assert code == 2
    assert "cannot create the run folder /sys/lucid-runs" in line and "--run.root" in line


def test_an_unwritable_home_is_named_as_the_synthetic_sets_cache_not_the_run_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``lucid fit`` without --data.root caches its built-in set under ~/.cache/lucid: with HOME
    read-only (/sys) that folder is at fault, and LUCID_CACHE_DIR the fix. Was: "cannot write
    /sys/nohome ...; pick a folder you can write (--run.root for a fit)", a writable run root."""
    monkeypatch.setenv("HOME", "/sys/nohome")
    monkeypatch.delenv("LUCID_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    code = cli.main(["fit", *FAST, "--run.root", str(tmp_path / "runs")])
    line = _one_error_line(capsys.readouterr().err, "fit")
    assert code == 2 and "--run.root" not in line, line
    assert "cannot write /sys/nohome/.cache/lucid, the built-in synthetic set's cache" in line
    assert "HOME is /sys/nohome" in line and "set LUCID_CACHE_DIR to a folder you can" in line
    monkeypatch.setenv("LUCID_CACHE_DIR", "/sys/lucid-cache")  # the variable itself unwritable
    assert cli.main(["fit", *FAST, "--run.root", str(tmp_path / "runs")]) == 2
    line = _one_error_line(capsys.readouterr().err, "fit")
    assert "cannot write /sys/lucid-cache, the built-in synthetic set's cache folder" in line
    assert "(LUCID_CACHE_DIR)" in line and "--run.root" not in line


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["--trainer.logger", "WandbLogger"],
         "--trainer.logger WandbLogger (lightning.pytorch.loggers.WandbLogger) needs the package "
         "wandb (wandb>=0.12.10), which is not installed; install it (pip install wandb) or "
         "leave out --trainer.logger"),
        (["--config", "[{class_path: CSVLogger, init_args: {save_dir: csv}}, CometLogger]"],
         "--trainer.logger CometLogger (lightning.pytorch.loggers.CometLogger) needs the "
         "package comet-ml (comet-ml>=3.44.4), which is not installed; install it (pip install "
         "comet-ml)"),
    ],
    ids=["flag", "one-of-a-list-in-a-config"],
)  # fmt: skip
def test_a_logger_whose_package_is_missing_is_one_line_naming_it_and_the_install(
    given: list[str],
    says: str,
    small_synthetic: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Was: three chained tracebacks (Lightning's ModuleNotFoundError, jsonargparse's "Problem
    with given class_path", "Does not validate against any of the Union subtypes"), exit 1."""
    for package in ("wandb", "comet_ml"):
        if importlib.util.find_spec(package):
            pytest.skip(f"{package} is installed here")
    if given[0] == "--config":
        config = tmp_path / "loggers.yaml"
        config.write_text(f"trainer:\n  logger: {given[1]}\n")  # one of a list, from a file
        given = ["--config", str(config)]
    root = small_synthetic("detect")
    code = cli.main(["fit", "--data.root", str(root), *FAST, "--run.root", str(tmp_path), *given])
    line = _one_error_line(capsys.readouterr().err, "fit")
    assert code == 2 and says in line, line


def test_a_broken_config_file_is_named_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "run.yaml"
    bad.write_text("data:\n  root: [1, 2\n")
    code = cli.main(["fit", "--config", str(bad)])
    line = _one_error_line(capsys.readouterr().err, "fit")
    assert code == 2 and f"--config {bad}:3:1: not valid YAML" in line


@pytest.mark.parametrize(
    ("made", "says"),
    [
        ("empty", "empty, not a mapping of settings"),
        ("list", "a YAML list, not a mapping of settings"),
        ("folder", "a folder; pass a YAML file"),
        ("missing", "no such file"),
        ("short-flag", "not valid YAML"),  # was: `-c` skipped this check
    ],
)
def test_a_config_file_without_settings_is_one_line_naming_it(
    made: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: "Unexpected config: " with nothing after it (empty), the parser's usage and a
    multi-line message (a folder, a missing file)."""
    path = tmp_path / "run.yaml"
    flag = "--config"
    if made == "empty":
        path.write_text("# nothing yet\n")
    elif made == "list":
        path.write_text("- trainer\n")
    elif made == "folder":
        path.mkdir()
    elif made == "short-flag":
        path.write_text("data:\n  root: [1, 2\n")
        flag = "-c"
    code = cli.main(["fit", flag, str(path)])
    line = _one_error_line(capsys.readouterr().err, "fit")
    assert code == 2 and f"--config {path}" in line and says in line, line


def test_a_config_naming_the_model_as_the_command_line_does_is_told_the_yaml_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``model: yolo26s`` at the top level: was "Unable to load config 'yolo26s'" from the
    parser, which reads a section's string as the path of a config file."""
    shorthand = tmp_path / "run.yaml"
    shorthand.write_text("# my run\nmodel: yolo26s\ndata:\n  img_size: 320\n")
    code = cli.main(["fit", "--config", str(shorthand)])
    line = _one_error_line(capsys.readouterr().err, "fit")
    assert code == 2 and f"--config {shorthand}:2: 'model: yolo26s'" in line
    assert "'  model: yolo26s'" in line


def test_a_checkpoint_naming_an_unknown_model_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "odd.ckpt"
    torch.save({"hyper_parameters": {"task": "detect", "model": "yolo99z"}, "state_dict": {}}, path)
    code = cli.main(["validate", "--ckpt", str(path)])
    line = _one_error_line(capsys.readouterr().err, "validate")
    assert code == 2 and "'yolo99z', which is not a lucid model" in line


def test_random_bytes_never_suggest_weights_only_false(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "noise.ckpt"
    path.write_bytes(bytes(range(256)) * 8)
    code = cli.main(["validate", "--ckpt", str(path)])
    line = _one_error_line(capsys.readouterr().err, "validate")
    assert code == 2 and "truncated or corrupt" in line
    assert "weights_only" not in line and "will likely succeed" not in line


def test_a_fit_that_trained_nothing_names_no_checkpoint_folder(tmp_path: Path) -> None:
    """``--trainer.max_epochs 0``: was 'checkpoints in ...' for a folder never made."""
    line = done_line(None, tmp_path, 1.0)
    assert "nothing trained, no checkpoint written" in line and "checkpoints in" not in line
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"x")
    line = done_line(None, tmp_path, 1.0)
    assert f"last.ckpt in {tmp_path / 'checkpoints'}" in line


def test_a_fit_that_never_validated_says_so_and_that_no_best_checkpoint_was_written(
    small_synthetic: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--trainer.check_val_every_n_epoch`` past the run's epochs (or ``limit_val_batches 0``,
    a ``max_steps`` before the first validation): was "best val/mAP50-95 (e2e box) n/a;
    checkpoints in ...", a folder with last.ckpt only."""
    root = small_synthetic("detect")
    runs = tmp_path / "runs"
    argv = ["fit", "--data.root", str(root), *FAST, "--run.root", str(runs),
            "--trainer.check_val_every_n_epoch", "5"]  # fmt: skip
    assert cli.main(argv) == 0
    folder = runs / "detect" / "train" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["last.ckpt"]
    out = capsys.readouterr().out
    assert "no validation ran, so no best.ckpt" in out and "check_val_every_n_epoch" in out
    assert f"last.ckpt in {folder}" in out and "n/a" not in out
    (folder / "best.ckpt").write_bytes(b"x")  # a resumed run's earlier best: named as before
    assert f"checkpoints in {folder}" in done_line(None, folder.parent, 1.0)


def test_a_resume_counts_as_finished_exactly_where_lightning_would_stop_it(
    tmp_path: Path,
) -> None:
    """As ``_FitLoop.done``: the steps against max_steps first, then the epochs its fit loop
    counts as run against max_epochs; -1 (or None) is no limit."""

    def line(epochs: int, steps: int, max_epochs: int | None, max_steps: int = -1) -> str | None:
        info = CheckpointInfo(Path("last.ckpt"), "detect", "yolo26n", {}, epochs, epochs, steps)
        return finished_line(Resume(info, tmp_path), max_epochs, max_steps)

    assert line(2, 10, 3) is None and line(2, 10, -1) is None and line(2, 10, None) is None
    assert "already finished its 2 epochs (trainer.max_epochs 2)" in str(line(2, 10, 2))
    assert "already finished its 10 steps (trainer.max_steps 10)" in str(line(2, 10, 5, 10))
    assert line(2, 10, 5, 11) is None
    assert "<the run's flags> --model.weights" in str(line(1, 1, 1))  # no config.yaml there
    (tmp_path / "config.yaml").write_text("{}")
    assert f"--config {tmp_path / 'config.yaml'} --model.weights" in str(line(1, 1, 1))


def test_a_resume_says_the_epoch_it_starts_at_and_that_the_rows_before_stay(
    tmp_path: Path,
) -> None:
    """Was: a resume with an explicit --ckpt_path said nothing of where it resumed (Lightning's
    "Restoring states" only); a best.ckpt (epoch 0's validation end) resumes at epoch 1."""

    def line(epoch: int, epochs_run: int, name: str = "last.ckpt") -> str:
        info = CheckpointInfo(tmp_path / name, "detect", "yolo26n", {}, epoch, epochs_run, 3)
        return resuming_line(Resume(info, tmp_path))

    assert line(0, 0) == (
        f"lucid fit: resuming {tmp_path} at epoch 0 from last.ckpt (no epoch done before it)"
    )
    assert "at epoch 1 from best.ckpt (epoch 0 done, their metrics.csv rows kept)" in line(
        0, 1, "best.ckpt"
    )
    assert "at epoch 3 from last.ckpt (epochs 0-2 done" in line(3, 3)


def test_a_fit_stopped_by_ctrl_c_names_its_epoch_and_the_resume_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: Ctrl-C printed only Lightning's "Detected KeyboardInterrupt" and exited 1; SIGTERM
    named the resume command. Both do now; Ctrl-C still exits 1 (Lightning's)."""

    class Trainer:
        interrupted, is_global_zero, current_epoch = True, True, 2

        def fit(self, *args: Any, **kwargs: Any) -> None:
            sys.exit(1)  # as Lightning's KeyboardInterrupt handler ends

    fake = type("Fake", (), {"resume": None, "trainer": Trainer(), "run_dir": tmp_path})()
    last = (tmp_path / "checkpoints" / "last.ckpt").resolve()
    last.parent.mkdir()
    last.write_bytes(b"x")  # written at epoch 2's start
    with pytest.raises(SystemExit):
        cli.LucidCLI.fit(fake, None, None)  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert "lucid fit: stopped by Ctrl-C (SIGINT) in epoch 2; resume with " in err
    assert f"`lucid fit --ckpt_path {last}`" in err


def test_a_write_that_fills_the_disk_raises_disk_full_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.save says only 'unexpected pos' when the disk fills: the space left tells."""
    target = tmp_path / "last.ckpt"
    target.write_bytes(b"previous")

    class Full:
        f_bavail, f_frsize = 3, 4096

    monkeypatch.setattr(os, "statvfs", lambda _: Full())

    def fill() -> None:
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"partial")
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 5 vs 3")

    with pytest.raises(DiskFullError, match=r"last\.ckpt: the disk is full \(12288 bytes left\)"):
        fill()
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_error_lines_for_wrapped_and_plain_faults() -> None:
    """A worker's rebuilt error shows its own message; ENOSPC anywhere in the chain is a full
    disk; anything else is a bug (None: the traceback stays)."""
    from lucid_train.data.image_io import CorruptImageError

    wrapped = CorruptImageError(
        "Caught CorruptImageError in DataLoader worker process 0.\nOriginal Traceback (most "
        'recent call last):\n  File "x.py", line 1\nlucid_train.data.image_io.CorruptImageError: '
        "a.jpg: cannot decode image"
    )
    assert error_line(wrapped) == "a.jpg: cannot decode image"
    full = OSError(errno.ENOSPC, "No space left on device", "metrics.csv")
    outer = RuntimeError("logger failed")
    outer.__cause__ = full
    assert "writing metrics.csv: the disk is full" in (error_line(outer) or "")
    assert (error_line(outer, "fit") or "").endswith(
        "free space (or pick another --run.root), then resume with --ckpt_path"
    )
    # only a fit resumes: was "resume with --ckpt_path" for an export to a full disk
    onnx = OSError(errno.ENOSPC, "No space left on device", "m.onnx")
    assert (error_line(onnx, "export") or "").endswith(
        "free space (or pick another --out), then run lucid export again"
    )
    assert error_line(KeyError("id")) is None
    assert error_line(ValueError("a bug")) is None


def _can_mount_tmpfs(where: Path) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


@pytest.mark.slow
def test_a_full_disk_during_a_fit_is_one_line(
    small_synthetic: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real 2 MB tmpfs as the run root (root only: skipped where mount is refused): the
    checkpoint does not fit. One line, exit 2, no partial file left."""
    disk = tmp_path / "disk"
    if not _can_mount_tmpfs(disk):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        root = small_synthetic("detect")
        code = cli.main(["fit", "--data.root", str(root), *FAST, "--run.root", str(disk)])
        line = _one_error_line(capsys.readouterr().err, "fit")
        leftovers: list[Any] = [p for p in disk.rglob("*") if ".tmp" in p.name]
    finally:
        subprocess.run(["umount", str(disk)], check=False)
    assert code == 2 and "the disk is full" in line and "keeps its previous version" in line
    assert not leftovers


@pytest.mark.parametrize("spelling", [["--model", "yolo27n"], ["--model=yolo26s-segm"]])
def test_an_unknown_model_name_is_refused_in_one_line_with_the_forms(
    spelling: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Before any data is read; was jsonargparse's report of the link from the name to the task
    ("Call to compute_fn of link ... failed")."""
    code = cli.main(["fit", *spelling, "--data.root", "/nonexistent"])
    line = _one_error_line(capsys.readouterr().err, "fit")
    assert code == 2
    assert "expected e.g. yolo26n, yolo26n-seg" in line and "compute_fn" not in line, line


def test_the_authors_flag_names_are_told_lucids_spelling(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--epochs 3``, ``imgsz=64`` (the authors' CLI) and ``--max_epochs`` (a dotless suffix of
    one flag) get one line naming lucid's flags; a value that looks like ``key=value`` is left
    alone. Was: jsonargparse's usage text ending in "unrecognized arguments"."""
    code = cli.main(
        ["fit", "--data.root", "/nonexistent", "--epochs", "3", "imgsz=64", "--max_epochs", "2",
         "--lr0", "0.1", "--run.name", "name=x"]
    )  # fmt: skip
    line = _one_error_line(capsys.readouterr().err, "fit")
    assert code == 2
    hints = [
        "--epochs (lucid: --trainer.max_epochs)",
        "imgsz (lucid: --data.img_size)",
        "--max_epochs (lucid: --trainer.max_epochs)",
        "--lr0 (lucid: --model.lr0)",
    ]
    assert all(hint in line for hint in hints), line
    assert "name (lucid" not in line, line


def test_fit_help_ends_with_the_flags_most_runs_set(capsys: pytest.CaptureFixture[str]) -> None:
    """After the full list (every Trainer argument), the few a run usually sets, with the
    authors' names beside lucid's."""
    with pytest.raises(SystemExit):
        cli.main(["fit", "--help"])
    tail = capsys.readouterr().out.rsplit("most used:", 1)[1]
    flat = " ".join(tail.split())
    for flag in ("--model yolo26s-seg", "--data.root PATH", "--trainer.max_epochs N [epochs]",
                 "--data.img_size N [imgsz]", "--ckpt_path last.ckpt"):  # fmt: skip
        assert flag in flat, flat


def test_a_fit_without_validation_is_not_asked_whether_it_logged_its_monitor(
    small_synthetic: Callable[[str], Path], tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    """``--trainer.limit_val_batches 0`` is a fit without validation: Lightning's best-checkpoint
    hint ("did you call log()?") was printed there; the done line says the score is n/a."""
    root = small_synthetic("detect")
    base = ["--data.root", str(root), *FAST, "--run.root", str(tmp_path)]
    assert cli.main(["fit", *overridden(base, "--trainer.limit_val_batches", "0")]) == 0
    assert not [w for w in recwarn if "could not find the monitored key" in str(w.message)]


def test_a_run_folder_held_by_another_fit_is_refused_and_freed_when_it_dies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: resuming a run still training started a second fit into the same folder, both
    writing its checkpoints and metrics.csv. A killed holder leaves no lock behind."""
    from lucid_train.run.run_folder import held_run_folder, release_run_folders

    run = tmp_path / "runs" / "detect" / "train"
    (run / "checkpoints").mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from lucid_train.run.run_folder import held_run_folder; "
            f"held_run_folder(Path({str(run)!r})); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        ckpt = run / "checkpoints" / "last.ckpt"
        torch.save({"epoch": 1, "hyper_parameters": {"task": "detect", "model": "yolo26n"}}, ckpt)
        (run / "config.yaml").write_text("model:\n  model: yolo26n\n")
        assert cli.main(["fit", "--ckpt_path", str(ckpt)]) == 2
        line = capsys.readouterr().err.strip()
        assert f"run folder {run} is in use by another lucid fit (pid {holder.pid}" in line
    finally:
        holder.kill()
        holder.wait()
    assert held_run_folder(run) == run  # the dead holder's lock went with it
    release_run_folders()


def test_a_file_system_without_locks_holds_nothing_and_refuses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some network mounts answer ``flock`` with ENOLCK: the fit goes on, unheld."""
    import fcntl

    from lucid_train.run.run_folder import held_run_folder, release_run_folders

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert held_run_folder(tmp_path) == tmp_path
    release_run_folders()


def test_a_device_lightning_cannot_parse_is_one_line_naming_the_flag(
    small_synthetic: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: Lightning's TypeError traceback ("devices selected with CPUAccelerator ...")."""
    root = small_synthetic("detect")
    flags = [*FAST, "--trainer.devices", "cuda:0", "--run.root", str(tmp_path)]
    assert cli.main(["fit", "--data.root", str(root), *flags]) == 2
    line = _one_error_line(capsys.readouterr().err, "fit")
    assert "Lightning refused --trainer.accelerator cpu, --trainer.devices cuda:0" in line


def test_a_fit_stopped_before_its_first_checkpoint_says_there_is_nothing_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    from lucid_train.cli.fit_outcome import stopped

    trainer = SimpleNamespace(is_global_zero=True, current_epoch=0)
    assert stopped(trainer, tmp_path, "SIGTERM") == 0
    assert "before its first checkpoint; nothing to resume: run the same command again" in (
        capsys.readouterr().err
    )
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"x")
    stopped(trainer, tmp_path, "SIGTERM")
    assert "stopped by SIGTERM in epoch 0; resume with `lucid fit --ckpt_path" in (
        capsys.readouterr().err
    )
