"""``lucid`` as a LightningCLI: ``--print_config`` fed back with ``--config`` reproduces a run,
the run folder keeps its ``config.yaml`` and a resume that contradicts it is refused in one line,
short model names pick the task, callbacks and loggers come by class path, and ``lucid fit``
with no argument still builds the main job. Apart from one tiny fit, the command is built and
not run (``LucidCLI(..., run=False)``)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from lucid_testing.cli_flags import overridden
from lucid_train.cli import CONFIG_FILE, LucidCLI, RunConfig, main
from lucid_train.cli.resume import ResumeConflictError, latest_last_checkpoint
from lucid_train.data.records import Task
from lucid_train.run.run_folder import LOCK_NAME
from lucid_train.weights.checkpoint_file import CheckpointError, read_checkpoint_info

TINY = ["--data.img_size", "64", "--data.batch_size", "4", "--data.num_workers", "0"]


def _printed(argv: list[str]) -> str:
    """What ``lucid <argv> --print_config`` writes (it exits 0)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main([*argv, "--print_config"])
    assert done.value.code in (0, None)
    return out.getvalue()


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@dataclass
class PrintedRun:
    flags: list[str]  # after `fit`
    config: Path  # their --print_config output
    run_dir: Path  # the run `lucid fit --config <config>` wrote
    data: Path

    @property
    def last(self) -> Path:
        return self.run_dir / "checkpoints" / "last.ckpt"


@pytest.fixture(scope="module")
def printed_run(
    small_synthetic: Callable[[Task], Path], tmp_path_factory: pytest.TempPathFactory
) -> PrintedRun:
    """A run started from the printed config of a command line that sets hyper-parameters
    away from their defaults (one training batch, one epoch)."""
    base = tmp_path_factory.mktemp("printed")
    data = small_synthetic("detect")
    flags = [
        "--data.root", str(data), *TINY, "--model.optimizer", "SGD", "--model.lr0", "0.003",
        "--model.warmup_epochs", "0.5", "--model.max_det", "50",
        "--trainer.accumulate_grad_batches", "2", "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1",
        "--data.scale_policy", "--trainer.deterministic", "--seed_everything", "3",
        "--run.root", str(base / "runs"), "--run.name", "printed",
    ]  # fmt: skip
    config = base / "run.yaml"
    config.write_text(_printed(["fit", *flags]))
    assert main(["fit", "--config", str(config)]) == 0
    return PrintedRun(flags, config, base / "runs" / "detect" / "printed", data)


@pytest.mark.slow
def test_print_config_fed_back_with_config_reproduces_the_runs_hyper_parameters(
    printed_run: PrintedRun, tmp_path: Path
) -> None:
    trained = read_checkpoint_info(printed_run.last).hyper_parameters
    flags = overridden(printed_run.flags, "--run.root", str(tmp_path))
    from_flags = LucidCLI(["fit", *flags], run=False)
    assert dict(from_flags.model.hparams) == trained
    expected = {"optimizer": "SGD", "lr0": 0.003, "warmup_epochs": 0.5, "max_det": 50,
                "accumulate": 2, "img_size": 64, "model": "yolo26n", "task": "detect"}  # fmt: skip
    assert {k: trained[k] for k in expected} == expected
    # the run folder keeps the config that produced it, as --print_config wrote it
    saved = yaml.safe_load((printed_run.run_dir / CONFIG_FILE).read_text())
    assert saved == yaml.safe_load(printed_run.config.read_text())
    assert saved["trainer"]["limit_train_batches"] == 1  # a count, not the fraction 1.0
    assert saved["data"]["scale_policy"] is True and saved["trainer"]["deterministic"] is True


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "shown"),
    [
        (["--trainer.max_epochs", "3"], "--trainer.max_epochs 3 contradicts trainer.max_epochs: 1"),
        (["--model", "yolo26n-seg"], "--model.model yolo26n-seg contradicts model.model: yolo26n"),
        (["--model.lr0", "0.1"], "--model.lr0 0.1 contradicts model.lr0: 0.003"),
    ],
)
def test_a_resume_flag_that_contradicts_the_runs_config_is_refused_in_one_line(
    printed_run: PrintedRun, flags: list[str], shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    given = overridden(printed_run.flags, *flags)  # not a flag given twice (warned of)
    code = main(["fit", *given, "--ckpt_path", str(printed_run.last)])
    line = _one_line(capsys.readouterr().err)
    assert code == 2
    assert line.startswith(f"lucid fit: error: resuming {printed_run.run_dir}: ")
    assert shown in line and str(printed_run.run_dir / CONFIG_FILE) in line


@pytest.mark.slow
def test_a_resume_naming_the_runs_data_folder_another_way_is_not_a_contradiction(
    printed_run: PrintedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: ``--data.root data`` against the saved ``/abs/data`` (one folder) refused as a
    contradiction; two spellings of one existing folder agree, another folder still differs."""
    monkeypatch.chdir(printed_run.data.parent)
    given = overridden(printed_run.flags, "--data.root", printed_run.data.name)
    cli = LucidCLI(["fit", *given, "--ckpt_path", str(printed_run.last)], run=False)
    assert cli.run_dir == printed_run.run_dir
    assert Path(cli.datamodule.root).resolve() == printed_run.data.resolve()
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ResumeConflictError, match=f"--data.root {other} contradicts data.root"):
        LucidCLI(
            ["fit", "--data.root", str(other), "--ckpt_path", str(printed_run.last)], run=False
        )


@pytest.mark.slow
def test_a_resume_config_file_is_checked_like_flags(
    printed_run: PrintedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("data:\n  batch_size: 2\n")
    code = main(["fit", "--ckpt_path", str(printed_run.last), "--config", str(other)])
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and "--data.batch_size 2 contradicts data.batch_size: 4" in line


@pytest.mark.slow
def test_a_resume_reads_the_runs_config_whatever_else_is_given(printed_run: PrintedRun) -> None:
    """No flag, or the same flags again: the run's config, its folder, no second config.yaml
    written; the resumed module is the checkpoint's."""
    before = sorted(p.name for p in printed_run.run_dir.parent.iterdir())
    saved = (printed_run.run_dir / CONFIG_FILE).read_text()
    trained = read_checkpoint_info(printed_run.last).hyper_parameters
    for flags in ([], printed_run.flags):
        cli = LucidCLI(["fit", *flags, "--ckpt_path", str(printed_run.last)], run=False)
        assert cli.run_dir == printed_run.run_dir
        assert dict(cli.model.hparams) == trained
        assert cli.datamodule.root == printed_run.data and cli.datamodule.batch_size == 4
        assert cli.trainer.max_epochs == 1
        assert not any(isinstance(cb, RunConfig) for cb in cli.trainer.callbacks)
    assert sorted(p.name for p in printed_run.run_dir.parent.iterdir()) == before
    assert (printed_run.run_dir / CONFIG_FILE).read_text() == saved


@pytest.mark.slow
def test_resuming_a_finished_run_names_its_epochs_and_how_to_train_more(
    printed_run: PrintedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that reached its max_epochs, resumed: one line with the epochs its checkpoint ran
    and the command that trains on from its weights (a resume keeps its max_epochs), exit 0, and
    no file of the run rewritten. Was: Lightning restored it, trained nothing, redrew
    results_summary.png without its per-class table and said only "done in 0 s"."""
    run = tmp_path / "finished"
    shutil.copytree(printed_run.run_dir, run)  # the module's run stays as the other tests see it
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != LOCK_NAME}
    last = run / "checkpoints" / "last.ckpt"
    assert main(["fit", "--ckpt_path", str(last)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "already finished" in line]
    assert len(lines) == 1, out
    assert lines[0].startswith(f"lucid fit: {run} already finished its 1 epoch ")
    assert "(trainer.max_epochs 1)" in lines[0] and "nothing trained" in lines[0]
    assert f"lucid fit --config {run / CONFIG_FILE} --model.weights {last}" in lines[0]
    assert "--trainer.max_epochs E" in lines[0] and "done in" not in out
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != LOCK_NAME}
    assert sorted(after) == sorted(files)
    assert [p.name for p in files if after[p] != files[p]] == []


@pytest.mark.slow
def test_ckpt_path_last_resumes_the_newest_runs_last_checkpoint_under_the_run_root(
    printed_run: PrintedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--ckpt_path last`` (Lightning's help names the keyword; the authors' ``resume``): the
    ``last.ckpt`` written most recently under ``--run.root``, said on stderr; with none there,
    one line naming the folder and what to pass."""
    root = printed_run.run_dir.parent.parent
    older = root / "detect" / "older" / "checkpoints" / "last.ckpt"
    older.parent.mkdir(parents=True)
    shutil.copy(printed_run.last, older)
    os.utime(older, (1_000_000_000, 1_000_000_000))  # written long before the printed run's
    cli = LucidCLI(["fit", "--ckpt_path", "last", "--run.root", str(root)], run=False)
    assert cli.run_dir == printed_run.run_dir
    assert f"--ckpt_path last: resuming {printed_run.last}" in capsys.readouterr().err
    empty = tmp_path / "none"
    assert main(["fit", "--ckpt_path", "last", "--run.root", str(empty)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"lucid fit: error: --ckpt_path last: no run under {empty} has a")


def test_ckpt_path_last_without_a_last_ckpt_names_the_runs_other_checkpoint(
    tmp_path: Path,
) -> None:
    """Was: a run whose last.ckpt was lost but whose best.ckpt is there: "no run has a
    checkpoints/last.ckpt", not naming the checkpoint it could resume from."""
    best = tmp_path / "detect" / "a" / "checkpoints" / "best.ckpt"
    best.parent.mkdir(parents=True)
    best.write_bytes(b"")
    with pytest.raises(CheckpointError, match=f"newest other checkpoint there is {best}: pass"):
        latest_last_checkpoint(tmp_path)
    with pytest.raises(CheckpointError) as err:
        latest_last_checkpoint(tmp_path / "none")
    assert "other checkpoint" not in str(err.value)


@pytest.mark.slow
def test_ckpt_path_last_resumes_a_run_moved_to_another_run_root(
    printed_run: PrintedRun, tmp_path: Path
) -> None:
    """Was: a run folder copied under another root, resumed with ``--ckpt_path last --run.root
    NEW``, was refused as ``--run.root NEW contradicts run.root: OLD`` in its config.yaml, though
    ``last`` needs the flag to find it. The root the run lies under is not a contradiction;
    another root with an explicit checkpoint still is."""
    moved = tmp_path / "moved"
    run = moved / "detect" / "printed"
    shutil.copytree(printed_run.run_dir, run)
    cli = LucidCLI(["fit", "--ckpt_path", "last", "--run.root", str(moved)], run=False)
    assert cli.run_dir == run
    with pytest.raises(ResumeConflictError, match=r"--run.root .* contradicts run.root"):
        LucidCLI(
            ["fit", "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), "--run.root",
             str(tmp_path / "elsewhere")],
            run=False,
        )  # fmt: skip


@pytest.mark.slow
def test_a_run_without_config_yaml_resumes_with_its_checkpoints_hyper_parameters(
    printed_run: PrintedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run folder written before config.yaml existed: the checkpoint's hyper-parameters stand
    in for it (module arguments, canvas, accumulation), and are checked the same way."""
    old = tmp_path / "old" / "checkpoints" / "last.ckpt"
    old.parent.mkdir(parents=True)
    shutil.copy(printed_run.last, old)
    data = ["--data.root", str(printed_run.data), "--data.num_workers", "0"]
    cli = LucidCLI(["fit", "--ckpt_path", str(old), *data], run=False)
    assert dict(cli.model.hparams) == read_checkpoint_info(old).hyper_parameters
    assert cli.datamodule.img_size == 64 and cli.run_dir == old.parent.parent
    assert "without its config.yaml" in _one_line(capsys.readouterr().err)  # and says so
    assert main(["fit", "--ckpt_path", str(old), *data, "--model.optimizer", "AdamW"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--model.optimizer AdamW contradicts model.optimizer: SGD" in line and str(old) in line


@pytest.mark.slow
def test_a_resume_whose_config_or_data_cannot_be_known_is_refused_naming_the_fix(
    printed_run: PrintedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: without config.yaml and --data.root the resume trained on the built-in set; with a
    config.yaml naming another model, a traceback of 582 size mismatches. A resume that goes on
    without config.yaml says where its settings come from."""
    old = tmp_path / "old" / "checkpoints" / "last.ckpt"
    old.parent.mkdir(parents=True)
    shutil.copy(printed_run.last, old)
    assert main(["fit", "--ckpt_path", str(old)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "config.yaml (the settings the run was started with) is missing" in line
    assert "give --data.root" in line
    data = ["--data.root", str(printed_run.data), "--data.num_workers", "0"]
    LucidCLI(["fit", "--ckpt_path", str(old), *data], run=False)
    said = _one_line(capsys.readouterr().err)
    assert said.startswith(f"lucid fit: resuming {old.parent.parent} without its config.yaml")

    edited = tmp_path / "edited" / "checkpoints" / "last.ckpt"
    edited.parent.mkdir(parents=True)
    shutil.copy(printed_run.last, edited)
    text = (printed_run.run_dir / "config.yaml").read_text()
    assert "model: yolo26n\n" in text
    (edited.parent.parent / "config.yaml").write_text(
        text.replace("model: yolo26n\n", "model: yolo26s\n")
    )
    assert main(["fit", "--ckpt_path", str(edited)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "config.yaml names the model yolo26s, but the checkpoint" in line
    assert "holds yolo26n" in line and "--model.weights" in line


@pytest.mark.slow
def test_validate_and_a_resume_take_the_checkpoints_classes(
    printed_run: PrintedRun, coco_with_categories: Callable[..., Path], tmp_path: Path
) -> None:
    """The data's classes follow the checkpoint's (assumptions D22): validate restricts the data
    to them, and a run started before the rule (its empty category a class, no ``classes`` in its
    config) resumes with the classes it trained."""
    data = coco_with_categories([{"id": 0, "name": "dataset"}])  # printed_run's set, id 0 added
    flags = ["--data.root", str(data), "--data.num_workers", "0"]
    cli = LucidCLI(["validate", "--ckpt", str(printed_run.last), *flags], run=False)
    cli.datamodule.setup("validate")
    assert cli.datamodule.schema.category_ids == (1, 2, 3)
    fit = LucidCLI(["fit", *overridden(flags, *TINY)], run=False)
    assert fit.datamodule.schema.category_ids == (1, 2, 3)

    old = tmp_path / "old" / "checkpoints" / "last.ckpt"
    old.parent.mkdir(parents=True)
    ckpt = torch.load(printed_run.last, weights_only=True)
    hp = ckpt["hyper_parameters"]
    hp.update(num_classes=4, category_ids=(0, 1, 2, 3), class_names=("dataset", *hp["class_names"]))
    torch.save(ckpt, old)
    resumed = LucidCLI(["fit", "--ckpt_path", str(old), *flags], run=False)
    assert resumed.datamodule.schema.category_ids == (0, 1, 2, 3)
    assert resumed.model.hparams["num_classes"] == 4


@pytest.mark.parametrize(
    ("flags", "module", "task"),
    [
        (["--model", "yolo26n"], "DetectModule", "detect"),
        (["--model", "yolo26s-seg"], "SegmentModule", "segment"),
        (["--model=yolo26n-pose"], "PoseModule", "pose"),
        (["--model.model", "yolo26n-obb"], "OBBModule", "obb"),
    ],
)
def test_short_model_names_pick_the_task_and_its_module(
    flags: list[str], module: str, task: Task, small_synthetic: Callable[[Task], Path],
    tmp_path: Path,
) -> None:  # fmt: skip
    argv = ["fit", *flags, "--data.root", str(small_synthetic(task)), *TINY]
    cli = LucidCLI([*argv, "--run.root", str(tmp_path)], run=False)
    assert type(cli.model).__name__ == module and cli.datamodule.task == task
    assert cli.model.hparams["model"] == flags[-1].removeprefix("--model=")
    assert cli.run_dir == tmp_path / task / "train"
    assert "\n  model: " + flags[-1].removeprefix("--model=") in _printed(argv)


@pytest.mark.slow
def test_fit_with_no_arguments_builds_the_main_job(
    small_synthetic: Callable[[Task], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """assumptions.md T61 and T62: yolo26n on the task's built-in set (generated by
    `synthetic_dataset` with its defaults; a small one stands in), 320 px, batch 16, 6 epochs,
    optimizer auto, accumulation auto, the authors' augmentation, precision auto, seed 0, the
    run's callbacks and CSV log; on the CPU the loader workers keep their cores."""
    import lucid_train.data.datamodule as datamodule
    from lucid_train.data import AugmentConfig
    from lucid_train.optim import EMACallback
    from lucid_train.report.metrics_log import RunCSVLogger
    from lucid_train.run.last_checkpoint import LastCheckpoint
    from lucid_train.run.trainer import EpochThroughput, IntervalProgressBar, RunArtifacts
    from lucid_train.tasks.task_modules import DetectModule

    asked: list[tuple[Any, ...]] = []

    def built_in(task: Task, *, cache_dir: Any = None, spec: Any = None) -> Path:
        asked.append((task, cache_dir, spec))
        return small_synthetic(task)

    monkeypatch.setattr(datamodule, "synthetic_dataset", built_in)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    try:
        cli = LucidCLI(["fit"], run=False)
        assert torch.get_num_threads() == max(1, (os.cpu_count() or 1) - cli.datamodule.num_workers)
    finally:
        torch.set_num_threads(threads)
    assert asked == [("detect", None, None)]
    assert type(cli.model) is DetectModule
    hp = cli.model.hparams
    assert (hp["model"], hp["img_size"], hp["lr0"]) == ("yolo26n", 320, None)
    assert hp["warmup_epochs"] == 3.0
    assert (hp["optimizer"], hp["accumulate"], hp["capture"]) == ("auto", "auto", "auto")
    dm = cli.datamodule
    assert (dm.img_size, dm.batch_size, dm.augment, dm.seed) == (320, 16, AugmentConfig(), 0)
    trainer = cli.trainer
    assert trainer.max_epochs == 6 and trainer.check_val_every_n_epoch == 1
    assert trainer.precision == "32-true" and trainer.accumulate_grad_batches == 1
    assert trainer.gradient_clip_val == 10.0 and trainer.num_sanity_val_steps == 0
    kinds = [type(cb) for cb in trainer.callbacks]
    for kind in (LastCheckpoint, EMACallback, RunArtifacts, EpochThroughput, IntervalProgressBar):
        assert kind in kinds
    assert RunConfig in kinds  # writes config.yaml when the fit starts
    assert isinstance(trainer.loggers[0], RunCSVLogger)
    assert cli.run_dir == Path("runs") / "detect" / "train"
    assert _printed(["fit"]).count("\n  precision: auto\n") == 1


def test_callbacks_and_loggers_given_by_class_path_join_the_runs_own(
    small_synthetic: Callable[[Task], Path], tmp_path: Path
) -> None:
    from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    from lucid_train.report.metrics_log import RunCSVLogger

    argv = [
        "fit", "--data.root", str(small_synthetic("detect")), *TINY,
        "--trainer.callbacks+=lightning.pytorch.callbacks.LearningRateMonitor",
        "--trainer.callbacks.logging_interval", "step",
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", str(tmp_path / "extra"),
        "--run.root", str(tmp_path / "runs"),
    ]  # fmt: skip
    config = tmp_path / "run.yaml"
    config.write_text(_printed(argv))
    for given in (argv, ["fit", "--config", str(config)]):
        trainer = LucidCLI(given, run=False).trainer
        monitors = [cb for cb in trainer.callbacks if isinstance(cb, LearningRateMonitor)]
        assert len(monitors) == 1 and monitors[0].logging_interval == "step"
        assert any(isinstance(cb, ModelCheckpoint) for cb in trainer.callbacks)  # best.ckpt
        assert isinstance(trainer.checkpoint_callback, ModelCheckpoint)
        assert any(isinstance(cb, RunConfig) for cb in trainer.callbacks)
        assert isinstance(trainer.loggers[0], RunCSVLogger)
        extra = [lg for lg in trainer.loggers if type(lg) is CSVLogger]
        assert len(extra) == 1 and Path(extra[0].save_dir) == tmp_path / "extra"


@pytest.mark.slow
def test_switches_of_the_old_command_still_take_no_value() -> None:
    printed = yaml.safe_load(_printed(["fit", "--trainer.deterministic", "--data.scale_policy"]))
    assert printed["trainer"]["deterministic"] is True
    assert printed["data"]["scale_policy"] is True


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--trainer.accumulate_grad_batches", "0"], "accumulate must be 'auto' or a positive"),
        (["--data.render", "gpu"], "data.render"),
    ],
)
def test_a_malformed_flag_is_a_usage_error(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["fit", *flags])
    assert done.value.code == 2
    assert said in capsys.readouterr().err


def test_fit_help_says_what_ckpt_path_takes(capsys: pytest.CaptureFixture[str]) -> None:
    """Not Lightning's text (keywords 'hpc', 'registry' and URLs lucid does not read): a run's
    checkpoint or 'last'."""
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "or 'last': the last.ckpt under --run.root written most recently" in text
    assert '``"hpc"`` and ``"registry"``' not in text


@pytest.mark.slow
def test_a_resume_whose_config_was_edited_since_the_run_started_is_refused(
    printed_run: PrintedRun, tmp_path: Path
) -> None:
    """Was: a canvas edited into config.yaml (64 -> 96) resumed at 96 px unsaid, and the
    checkpoint's hyper-parameters then said 96 for epochs trained at 64."""
    run = tmp_path / "edited"
    shutil.copytree(printed_run.run_dir, run)
    config = run / CONFIG_FILE
    doc = yaml.safe_load(config.read_text())
    doc["data"]["img_size"] = 96
    config.write_text(yaml.safe_dump(doc))
    with pytest.raises(ResumeConflictError, match=r"the model's img_size is 96 .* with 64;"):
        LucidCLI(["fit", "--ckpt_path", str(run / "checkpoints" / "last.ckpt")], run=False)


def test_a_resume_says_a_renamed_class_and_the_epochs_a_best_ckpt_trains_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: a class renamed in data.yaml went on unsaid; a resume from best.ckpt (epoch 0) of a
    run whose last.ckpt holds epoch 3 replaced epochs 1-2 without a word."""
    from lucid_train.cli import resume as resume_module

    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    (folder / "last.ckpt").write_bytes(b"")
    trained = {"model": "yolo26n", "img_size": 64, "class_names": ["c0", "c1"], "weights": "w"}
    best = resume_module.CheckpointInfo(folder / "best.ckpt", "detect", "yolo26n", trained, 1)
    last = resume_module.CheckpointInfo(folder / "last.ckpt", "detect", "yolo26n", trained, 3)
    monkeypatch.setattr(resume_module, "read_checkpoint_info", lambda path: last)
    resume = resume_module.Resume(best, tmp_path / "run")
    now = {**trained, "class_names": ("dog", "cat"), "weights": None}
    resume_module.check_resumed_module(resume, now)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        'lucid fit: the data renames class_names ["dog", "cat"] (trained as ["c0", "c1"]): the '
        "run goes on under the new names"
    )
    assert err[1].startswith(f"lucid fit: best.ckpt holds epoch 1 and {folder / 'last.ckpt'} "
                             "epoch 3: epochs 1 to 2 are trained again")  # fmt: skip
    with pytest.raises(ResumeConflictError, match=r"the model's img_size is 96 "):
        resume_module.check_resumed_module(resume, {**now, "img_size": 96})
