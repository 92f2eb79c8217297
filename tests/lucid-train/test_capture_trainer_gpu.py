"""Capture inside the trainer on the GPU: a fit with the network and the loss replayed ends where
the same fit run eager ends, bit for bit — weights and buffers, optimizer state, GradScaler, LR
schedule, EMA, every logged training loss and the validation metrics — and says what it did.

Every fit serves the batches of one epoch as `MIXED` (full, a partial batch between full ones,
a batch with one image without instances, a batch with none, a partial last batch), so each case
meets every layout of the issue; two epochs put validation (EMA weights swapped in) between them.
Each test also counts recordings, retirements, replays and graph launches, so a silent fall back
to eager fails it. The segmentation heads (prototypes, semantic branch) are part of the network
recording and the mask loss part of the loss recording.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins import MixedPrecision

from lucid_capture import Reason
from lucid_capture.recorder import Recorder
from lucid_testing.trainer_fits import (
    MIXED,
    CloseMosaicAt,
    Fit,
    KillAtEpoch,
    KilledError,
    Layout,
    ShrinkCapacity,
    differences,
    run_fit,
)
from lucid_train.tasks.task_modules import DetectModule, module_class

pytestmark = [pytest.mark.gpu, pytest.mark.heavy(2)]  # two fits a test

PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")
EPOCHS = 2
MATRIX = [
    *[("detect", p, a) for p in PRECISIONS for a in (1, 2, 3)],
    *[("pose", p, a) for p in PRECISIONS for a in (1, 2, 3)],
    *[("obb", p, a) for p in PRECISIONS for a in (1, 2)],
    *[("segment", p, a) for p in PRECISIONS for a in (1, 2)],
]


def assert_same_fit(eager: Fit, replay: Fit, *, skip: tuple[str, ...] = ()) -> None:
    diffs = [k for k in differences(eager.state, replay.state) if not k.startswith(skip)]
    assert not diffs, f"{len(diffs)} differ from eager, first: {diffs[:6]}"


def assert_replayed(
    recorder: Recorder,
    *,
    full: int,
    partial: int,
    recordings: int = 1,
    retirements: int = 0,
    pending: int = 0,
) -> None:
    """What one recorder did over a fit of ``full`` + ``partial`` training batches."""
    stats = recorder.stats
    summary = stats.summary()
    assert stats.recordings == recordings, summary
    assert stats.retirements == retirements, summary
    # Full batches replay and partial ones run eager (shape), except that a loss call with an
    # image over capacity runs eager for that reason first, full or partial.
    over = stats.eager[Reason.OVER_CAPACITY]
    assert stats.replays + stats.eager[Reason.SHAPE] + over == full + partial, summary
    assert stats.replays >= full - over and stats.eager[Reason.SHAPE] <= partial, summary
    assert stats.replays > 0, summary
    assert stats.eager[Reason.PENDING_BACKWARD] == pending, summary
    # one forward and one backward launch per replay; one backward recording per recording
    assert stats.graph_launches == 2 * stats.replays, summary
    assert stats.backward_recordings == recordings, summary
    unexpected = set(stats.eager) - {
        Reason.SHAPE,
        Reason.OVER_CAPACITY,
        Reason.INFERENCE,
        Reason.PENDING_BACKWARD,
    }
    assert not unexpected, summary


def _batches(layout: Layout, epochs: int) -> tuple[int, int]:
    return layout.full_batches() * epochs, layout.partial_batches() * epochs


@pytest.mark.parametrize(("task", "precision", "accumulate"), MATRIX)
def test_captured_fit_matches_the_eager_fit_bitwise(
    task: str,
    precision: str,
    accumulate: int,
    small_synthetic: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    root = small_synthetic(task)
    common: dict[str, Any] = {"precision": precision, "accumulate": accumulate, "epochs": EPOCHS}
    eager = run_fit(task, root, tmp_path / "eager", capture="off", **common)
    replay = run_fit(task, root, tmp_path / "replay", capture="on", **common)
    assert_same_fit(eager, replay)
    full, partial = _batches(MIXED, EPOCHS)
    assert_replayed(replay.module.network_recorder, full=full, partial=partial)
    assert_replayed(replay.module.loss_recorder, full=full, partial=partial)
    assert eager.module.network_recorder.stats.replays == 0


@pytest.mark.parametrize("task", ["detect", "segment"])
def test_a_loss_capacity_grown_mid_fit_records_again_and_keeps_eager_bits(
    task: str, small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """A batch over the recorded capacity (shrunk to 1 for the second epoch) grows it: the old
    recording is freed, the loss records again at the larger capacity, and the fit ends where
    the eager one (each batch padded to its own largest count) ends."""
    root = small_synthetic(task)
    common: dict[str, Any] = {"precision": "16-mixed", "epochs": 3, "loss_capacity": None}
    shrink = [ShrinkCapacity(1, 1)]
    eager = run_fit(task, root, tmp_path / "eager", capture="off", callbacks=shrink, **common)
    replay = run_fit(task, root, tmp_path / "replay", capture="on", callbacks=shrink, **common)
    assert_same_fit(eager, replay)
    recorder = replay.module.loss_recorder
    stats = recorder.stats
    assert stats.recordings == 2 and recorder.capacity >= 8, stats.summary()
    assert stats.eager[Reason.OVER_CAPACITY] == 0 and stats.replays > 0, stats.summary()


@pytest.mark.parametrize("task", ["detect", "segment"])
def test_the_capacity_fitted_again_when_mosaic_closes_keeps_eager_bits(
    task: str, small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """At the epoch where mosaic closes (here the third of three), the first batch fits the
    loss capacity again: the recording is freed, the loss records at the new capacity, and the
    fit ends where the eager one ends."""
    root = small_synthetic(task)
    common: dict[str, Any] = {"precision": "16-mixed", "epochs": 3, "loss_capacity": None}
    close = [CloseMosaicAt(2)]
    eager = run_fit(task, root, tmp_path / "eager", capture="off", callbacks=close, **common)
    replay = run_fit(task, root, tmp_path / "replay", capture="on", callbacks=close, **common)
    assert_same_fit(eager, replay)
    stats = replay.module.loss_recorder.stats
    assert stats.recordings == 2 and replay.module.capacity.fitted_in == 2, stats.summary()
    assert stats.eager[Reason.OVER_CAPACITY] == 0 and stats.replays > 0, stats.summary()


@pytest.mark.parametrize("task", ["detect", "pose"])
def test_accumulation_changed_after_the_first_recording_matches_eager(
    task: str, small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    root = small_synthetic(task)
    layout = Layout(MIXED.sizes, MIXED.empty, accumulation={0: 1, 1: 2, 2: 3})
    eager = run_fit(task, root, tmp_path / "eager", capture="off", layout=layout, epochs=3)
    replay = run_fit(task, root, tmp_path / "replay", capture="on", layout=layout, epochs=3)
    assert_same_fit(eager, replay)
    full, partial = _batches(layout, 3)
    assert_replayed(replay.module.network_recorder, full=full, partial=partial)


@pytest.mark.parametrize(
    ("task", "accumulate"), [("detect", "auto"), ("detect", 3), ("segment", "auto")]
)
def test_the_modules_own_accumulation_captured_matches_eager(
    task: str, accumulate: int | str, small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """The module sums batches itself (ramped for ``auto``; windows across epoch ends) while
    Lightning steps every batch: the recorders see gradients kept between backward calls and
    the validation in between, as under Lightning's own accumulation."""
    root = small_synthetic(task)
    common: dict[str, Any] = {"precision": "16-mixed", "module_accumulate": accumulate, "epochs": 3}
    eager = run_fit(task, root, tmp_path / "eager", capture="off", **common)
    replay = run_fit(task, root, tmp_path / "replay", capture="on", **common)
    assert replay.module.accumulation is not None and replay.module.accumulation.nominal > 1
    assert_same_fit(eager, replay)
    full, partial = _batches(MIXED, 3)
    assert_replayed(replay.module.network_recorder, full=full, partial=partial)
    assert_replayed(replay.module.loss_recorder, full=full, partial=partial)


class _SwapWeights(L.Callback):
    """``load_state_dict(assign=True)`` with fresh weights before step ``at``: new tensors."""

    def __init__(self, fresh: dict[str, torch.Tensor], at: int) -> None:
        self.fresh = fresh
        self.at = at
        self.done = False

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, i: int
    ) -> None:
        if trainer.global_step == self.at and not self.done:
            state = {k: v.clone().cuda() for k, v in self.fresh.items()}
            pl_module.model.load_state_dict(state, assign=True)  # type: ignore[union-attr]
            self.done = True


def test_load_state_dict_assign_mid_fit_retires_and_the_new_weights_train_like_eager(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    root = small_synthetic("detect")
    torch.manual_seed(7)
    fresh = {
        k: v.clone() for k, v in module_class("detect")(num_classes=3).model.state_dict().items()
    }

    def fit(capture: str) -> Fit:
        swap = _SwapWeights(fresh, at=2)
        return run_fit(
            "detect", root, tmp_path / capture, capture=capture, callbacks=[swap],
            keep_gradients=True,
        )  # fmt: skip

    eager, replay = fit("off"), fit("on")
    # The optimizer keeps the old tensors, as in eager; the new ones gather gradients all along
    # (compared at every step through the probe's references).
    assert any(k.startswith("kept/") for k in replay.state)
    assert_same_fit(eager, replay)
    full, partial = _batches(MIXED, EPOCHS)
    assert_replayed(
        replay.module.network_recorder, full=full, partial=partial, recordings=2, retirements=1
    )


class TwoForwardsDetect(DetectModule):
    """Two forwards (the images and their mirror) before one backward of the summed loss."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        data, packed = batch
        targets = packed["type"](**packed["fields"])
        images = data.render().float_images()
        size = (int(images.shape[-2]), int(images.shape[-1]))
        first = self.compute_loss(self.forward_network(images), targets, size)
        second = self.compute_loss(self.forward_network(images.flip(-2)), targets, size)
        total: torch.Tensor = first.total + second.total
        self.log("train/loss", total.detach(), on_step=True, batch_size=len(data))
        return total


def test_two_forwards_before_one_backward_match_eager(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    root = small_synthetic("detect")
    kw: dict[str, Any] = {"module_type": TwoForwardsDetect}
    eager = run_fit("detect", root, tmp_path / "eager", capture="off", **kw)
    replay = run_fit("detect", root, tmp_path / "replay", capture="on", **kw)
    assert_same_fit(eager, replay)
    full, partial = _batches(MIXED, EPOCHS)
    for recorder in (replay.module.network_recorder, replay.module.loss_recorder):
        # the second call of each full batch runs eager while the first one's backward is pending
        assert_replayed(recorder, full=full, partial=2 * partial, pending=full)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_gradients_kept_by_a_callback_keep_their_values_like_eager(
    accumulate: int, small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """A callback holding each step's ``.grad`` tensors past the step sees what eager shows it:
    a replay must never hand out (and later overwrite) its own gradient buffers (rule 1)."""
    root = small_synthetic("detect")
    kw: dict[str, Any] = {"keep_gradients": True, "accumulate": accumulate}
    eager = run_fit("detect", root, tmp_path / "eager", capture="off", **kw)
    replay = run_fit("detect", root, tmp_path / "replay", capture="on", **kw)
    assert any(k.startswith("kept/") for k in replay.state)
    assert_same_fit(eager, replay)


class _ScaleTrace(L.Callback):
    def __init__(self) -> None:
        self.scales: list[float] = []

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, out: Any, batch: Any, i: int
    ) -> None:
        self.scales.append(float(trainer.precision_plugin.scaler.get_scale()))  # type: ignore[attr-defined]


def test_fp16_overflow_steps_are_skipped_and_recover_like_eager(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """A scale doubling every step reaches overflow within the fit: those steps are skipped
    (scale halved, weights untouched) and later ones train, on both routes alike."""
    root = small_synthetic("detect")

    def fit(capture: str) -> tuple[Fit, list[float]]:
        scaler = torch.amp.GradScaler("cuda", init_scale=2.0**14, growth_interval=1)
        trace = _ScaleTrace()
        plugin = MixedPrecision("16-mixed", "cuda", scaler=scaler)
        result = run_fit(
            "detect", root, tmp_path / capture, capture=capture, epochs=3,
            plugins=[plugin], callbacks=[trace], precision="16-mixed",
        )  # fmt: skip
        return result, trace.scales

    (eager, eager_scales), (replay, replay_scales) = fit("off"), fit("on")
    drops = [i for i in range(1, len(eager_scales)) if eager_scales[i] < eager_scales[i - 1]]
    assert drops and drops[0] < len(eager_scales) - 1, f"no overflow and recovery: {eager_scales}"
    assert eager_scales == replay_scales
    assert_same_fit(eager, replay)
    full, partial = _batches(MIXED, 3)
    assert_replayed(replay.module.network_recorder, full=full, partial=partial)


@pytest.mark.parametrize(("first", "then"), [("on", "off"), ("off", "on")])
def test_a_checkpoint_resumes_across_capture_on_and_off(
    first: str, then: str, small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """A run killed with capture ``first`` and resumed with capture ``then`` ends bitwise where an
    uninterrupted eager run ends: a checkpoint does not know whether capture made it."""
    root = small_synthetic("detect")
    straight = run_fit("detect", root, tmp_path / "straight", capture="off", epochs=3)
    with pytest.raises(KilledError):
        run_fit(
            "detect", root, tmp_path / "killed", capture=first, epochs=3,
            callbacks=[KillAtEpoch(2)], checkpoints=True,
        )  # fmt: skip
    last = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    resumed = run_fit(
        "detect", root, tmp_path / "killed", capture=then, epochs=3, ckpt_path=last,
        checkpoints=True,
    )  # fmt: skip
    # Logged losses exist only for the epochs each run trained; throughput is wall-clock time.
    assert_same_fit(straight, resumed, skip=("logged/", "metric/time/"))
    if then == "on":
        full, partial = MIXED.full_batches(), MIXED.partial_batches()
        assert_replayed(resumed.module.network_recorder, full=full, partial=partial)
