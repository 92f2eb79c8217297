"""Capture inside the trainer: on by default on CUDA only, per-recorder switches, targets padded
to the loss capacity (batches that do not fit keep their own size), state-dict keys unchanged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from lucid_capture import Reason
from lucid_train.data import LucidDataModule
from lucid_train.errors import SettingError
from lucid_train.run.trainer import build_trainer
from lucid_train.tasks.module import YOLOModule
from lucid_train.tasks.task_modules import module_class


def _setup(root: Path, task: str, **options: object) -> tuple[LucidDataModule, YOLOModule]:
    dm = LucidDataModule(task, root, img_size=64, batch_size=4, num_workers=0)  # type: ignore[arg-type]
    dm.setup("fit")
    s = dm.schema
    module = module_class(s.task)(
        num_classes=s.num_classes,
        num_keypoints=s.num_keypoints or None,
        img_size=64,
        **options,  # type: ignore[arg-type]
    )
    return dm, module


def _fit(dm: LucidDataModule, module: YOLOModule, tmp_path: Path) -> None:
    trainer = build_trainer(
        tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(module, datamodule=dm)


@pytest.mark.slow
def test_auto_capture_stays_off_on_the_cpu_and_changes_nothing(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    dm, module = _setup(small_synthetic("detect"), "detect")
    _fit(dm, module, tmp_path)
    for recorder in (module.network_recorder, module.loss_recorder):
        assert not recorder.enabled and recorder.stats.recordings == 0
        assert set(recorder.stats.eager) == {Reason.DISABLED}
    assert module.target_capacity is None  # eager padding: each batch's own largest count


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::lucid_capture.CaptureWarning")
def test_capture_on_without_cuda_runs_eager_and_says_why(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    dm, module = _setup(small_synthetic("detect"), "detect", capture="on", capture_loss=False)
    _fit(dm, module, tmp_path)
    assert module.network_recorder.stats.eager[Reason.NO_CUDA] == 3  # 2 training + 1 val
    assert set(module.loss_recorder.stats.eager) == {Reason.DISABLED}  # switched off by name


def test_recorders_add_no_state_dict_keys(small_synthetic: Callable[[str], Path]) -> None:
    _, on = _setup(small_synthetic("pose"), "pose", capture="on")
    _, off = _setup(small_synthetic("pose"), "pose", capture="off")
    assert list(on.state_dict()) == list(off.state_dict())
    assert not any("recorder" in key for key in on.state_dict())


def test_targets_pad_to_the_capacity_and_a_batch_that_does_not_fit_keeps_its_size(
    small_synthetic: Callable[[str], Path],
) -> None:
    dm, module = _setup(small_synthetic("detect"), "detect", loss_capacity=16)
    batch = next(iter(dm.train_dataloader()))
    assert module.prepare_targets(batch).mask.shape[1] == 16
    largest = int(torch.bincount(batch.batch_idx).max())
    assert largest >= 2, "the synthetic batch should hold an image with several objects"
    _, tight = _setup(small_synthetic("detect"), "detect", loss_capacity=largest - 1)
    assert tight.prepare_targets(batch).mask.shape[1] == largest


def test_the_first_batch_fits_the_recorded_capacity_and_a_busier_batch_grows_it(
    small_synthetic: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """With capture on and no `loss_capacity`, the first training batch sets the recorded
    capacity (a multiple of 8 a quarter above its largest count), whatever the default guess;
    later batches that fit keep it. The first batch over it sets a larger one (at least double,
    a multiple of 8 a quarter above its largest count), so that the next batches replay; the
    recording is made again at the next call. A capacity the user gave stays, and the batch
    over it runs eager at its own size."""
    dm, module = _setup(small_synthetic("detect"), "detect", capture="on")
    batch = next(iter(dm.train_dataloader()))
    largest = int(torch.bincount(batch.batch_idx).max())
    recorder = module.loss_recorder
    recorder.enabled = True  # as a fit's CaptureCallback does
    recorder.capacity = 500  # a guess far from this data
    fitted = module.capacity_for(batch)
    assert fitted == recorder.capacity == module.target_capacity
    assert fitted is not None and fitted % 8 == 0
    assert largest * 5 / 4 <= fitted < largest * 5 / 4 + 8
    assert "the loss records with" in capsys.readouterr().out
    assert module.capacity_for(batch) == fitted and recorder.stats.recordings == 0
    recorder.capacity = largest - 1  # as if fitted on a sparser batch
    grown = module.capacity_for(batch)
    assert grown is not None and grown >= max(2 * (largest - 1), largest * 5 / 4) and grown % 8 == 0
    assert recorder.capacity == grown == module.target_capacity
    assert module.prepare_targets(batch).mask.shape[1] == grown
    assert "recording the loss again at" in capsys.readouterr().out
    recorder.stats.recordings = recorder.max_recordings - 1  # no recording left to spend
    recorder.capacity = largest - 1
    assert module.capacity_for(batch) is None and recorder.capacity == largest - 1
    _, given = _setup(small_synthetic("detect"), "detect", capture="on", loss_capacity=largest - 1)
    given.loss_recorder.enabled = True
    assert given.capacity_for(batch) is None
    assert given.prepare_targets(batch).mask.shape[1] == largest
    assert given.loss_recorder.capacity == largest - 1  # neither fitted nor grown


def test_the_first_batch_without_mosaic_fits_the_capacity_again(
    small_synthetic: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A capacity fitted or grown on mosaic batches (four images' targets each) is fitted again
    by the first batch of the epoch where mosaic closes, once; a capacity fitted in or after
    that epoch, and a recorder without a recording to spare beside the one kept for a
    retirement, keep theirs."""
    dm, module = _setup(small_synthetic("detect"), "detect", capture="on")
    batch = next(iter(dm.train_dataloader()))
    recorder = module.loss_recorder
    recorder.enabled = True
    clock = SimpleNamespace(current_epoch=0, datamodule=SimpleNamespace(close_mosaic_from=2))
    module.trainer = clock  # type: ignore[assignment]
    fitted = module.capacity_for(batch)
    assert fitted is not None and "the first batch holds" in capsys.readouterr().out
    recorder.capacity = 200  # as if grown on busy mosaics
    clock.current_epoch = 1
    assert module.capacity_for(batch) == 200
    clock.current_epoch = 2
    assert module.capacity_for(batch) == fitted == recorder.capacity
    assert "the first batch without mosaic holds" in capsys.readouterr().out
    recorder.capacity = 200  # grown again after closing: stays
    clock.current_epoch = 3
    assert module.capacity_for(batch) == 200
    _, spent = _setup(small_synthetic("detect"), "detect", capture="on")
    spent.loss_recorder.enabled = True
    spent.trainer = SimpleNamespace(  # type: ignore[assignment]
        current_epoch=0, datamodule=SimpleNamespace(close_mosaic_from=1)
    )
    spent.capacity_for(batch)
    spent.loss_recorder.capacity = 200
    spent.loss_recorder.stats.recordings = spent.loss_recorder.max_recordings - 1
    spent.trainer.current_epoch = 1
    assert spent.capacity_for(batch) == 200


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::lucid_capture.CaptureWarning")
def test_a_capacity_grown_mid_fit_trains_as_each_batch_padded_to_its_own_size(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """On the CPU (capture on, every call eager for want of CUDA) the growth runs in a real fit:
    the padded loss does not depend on the capacity, so the fit ends where one without capture
    ends. The GPU twin records again and replays (`test_capture_trainer_gpu.py`)."""
    from lucid_testing.trainer_fits import ShrinkCapacity, differences, run_fit

    root = small_synthetic("detect")
    shrink = ShrinkCapacity(1, 1)
    common: dict[str, Any] = {"epochs": 2, "loss_capacity": None, "accelerator": "cpu"}
    plain = run_fit("detect", root, tmp_path / "off", capture="off", **common)
    grown = run_fit("detect", root, tmp_path / "on", capture="on", callbacks=[shrink], **common)
    assert shrink.grown_to is not None and shrink.grown_to >= 8
    assert not [k for k in differences(plain.state, grown.state) if not k.startswith("metric/time")]


def test_unknown_capture_mode_and_empty_capacity_are_refused(
    small_synthetic: Callable[[str], Path],
) -> None:
    with pytest.raises(SettingError, match="capture must be one of"):
        _setup(small_synthetic("detect"), "detect", capture="sometimes")
    with pytest.raises(
        SettingError, match=r"loss_capacity \(--model.loss_capacity\): expected >= 1, got 0"
    ):
        _setup(small_synthetic("detect"), "detect", loss_capacity=0)


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_targets_of_images_without_instances_have_the_structure_of_any_other(
    task: str, small_synthetic: Callable[[str], Path]
) -> None:
    """A recorded loss bakes in the structure of its targets (which optional fields exist): a
    batch whose images have no instances must not change it, or it runs eager (``arguments``)."""
    from lucid_capture.tree import describe
    from lucid_testing.trainer_fits import MIXED, LayoutDataModule

    dm = LayoutDataModule(task, small_synthetic(task), MIXED)
    dm.setup("fit")
    _, module = _setup(small_synthetic(task), task, loss_capacity=16)
    batches = list(dm.train_dataloader())
    assert any(len(b.labels) == 0 for b in batches), (
        "the layout must hold a batch without instances"
    )
    shapes = {describe(module.prepare_targets(b)) for b in batches}
    assert len(shapes) == 1, shapes


@pytest.mark.slow
@pytest.mark.parametrize("task", ["detect", "obb"])
def test_every_loss_call_of_a_fit_has_one_structure(
    task: str,
    small_synthetic: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A recording bakes in its call's structure and constants; a fit whose loss calls change
    them between steps or epochs (a Python-number ProgLoss weight, a field missing on a batch
    without instances) would replay nothing after the first change. Counted on the CPU."""
    from lucid_capture import LossRecorder
    from lucid_capture.tree import describe
    from lucid_testing.trainer_fits import MIXED, LayoutDataModule

    seen: list[str] = []
    call = LossRecorder.__call__

    def spy(self: LossRecorder, *args: object) -> object:
        seen.append(describe(args))
        return call(self, *args)

    monkeypatch.setattr(LossRecorder, "__call__", spy)
    dm = LayoutDataModule(task, small_synthetic(task), MIXED)
    _, module = _setup(small_synthetic(task), task, loss_capacity=16)
    trainer = build_trainer(
        tmp_path, max_epochs=2, limit_val_batches=1, enable_progress_bar=False,
        enable_model_summary=False, logger=False,
    )  # fmt: skip
    trainer.fit(module, datamodule=dm)
    assert len(seen) == 2 * len(MIXED.sizes)
    assert len(set(seen)) == 1, sorted(set(seen))
