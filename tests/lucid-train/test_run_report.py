"""The run report: PR/F1 curves and the confusion matrix hold hand-computed numbers, obb matches
by polygon IoU, label statistics are relative to each image, and one tiny fit writes every
figure at its size beside TensorBoard events of the CSV's metrics; validation figures are
drawn at most every DRAW_INTERVAL_S and a fit's last validation's always."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import pytest
from PIL import Image

from lucid_train.data import LucidDataModule
from lucid_train.data.records import ImageRecord
from lucid_train.data.targets import Targets
from lucid_train.evaluation.detection_curves import DetectionDiagnostics, box_iou_matrix
from lucid_train.report.label_stats import LABEL_PANEL, label_statistics
from lucid_train.report.metrics_log import read_rows
from lucid_train.report.run_report import DRAW_INTERVAL_S, REPORT_FILES, RunReport
from lucid_train.report.summary_page import SUMMARY_SIZE, summary_facts
from lucid_train.report.val_mosaic import mosaic_size, truth_records
from lucid_train.report.validation_curves import (
    CURVE_SIZE,
    confusion_size,
    per_true_class,
    write_confusion_matrices,
    write_curve_plots,
)
from lucid_train.run.trainer import build_trainer
from lucid_train.tasks.task_modules import module_class


def _box(x: float, y: float, w: float = 10, h: float = 10) -> list[float]:
    return [x, y, x + w, y + h]


def test_box_iou_matrix_is_intersection_over_union() -> None:
    iou = box_iou_matrix([_box(0, 0), _box(0, 0, 0, 0)], [_box(5, 0), _box(20, 20), _box(0, 0)])
    assert iou == pytest.approx(np.array([[50 / 150, 0, 1], [0, 0, 0]]))


def test_curves_at_iou_half_hold_hand_computed_precision_recall_and_ap50() -> None:
    diag = DetectionDiagnostics(num_classes=2)
    assert box_iou_matrix([_box(51, 51)], [_box(50, 50)])[0, 0] == pytest.approx(81 / 119)
    diag.add(
        det_boxes=[_box(0, 0), _box(300, 300), _box(51, 51), _box(1, 0), _box(100, 100)],
        det_scores=[0.9, 0.8, 0.7, 0.6, 0.5],
        det_labels=[0, 0, 0, 0, 1],
        gt_boxes=[_box(0, 0), _box(50, 50), _box(100, 100), _box(150, 150)],
        gt_labels=[0, 0, 1, 1],
        gt_difficult=[False, False, True, False],
    )
    curves = diag.curves()
    # class 0 by score: TP, FP (nowhere), TP, FP (its box was taken by the 0.9 one)
    at = {t: int(np.argmin(np.abs(curves.confidence - t))) for t in (0.85, 0.75, 0.65, 0.55)}
    p, r = curves.precision[0], curves.recall[0]
    assert [p[at[t]] for t in at] == pytest.approx([1.0, 0.5, 2 / 3, 0.5])
    assert [r[at[t]] for t in at] == pytest.approx([0.5, 0.5, 1.0, 1.0])
    assert p[-1] == 1.0 and r[-1] == 0.0  # nothing kept at confidence 1
    # COCO interpolation: the envelope is 1 up to recall 0.5 (51 of 101 points), then 2/3
    assert curves.ap50[0] == pytest.approx((51 + 50 * 2 / 3) / 101)
    # class 1: its detection reaches only the difficult box (ignored); its other box is missed
    assert curves.instances.tolist() == [2, 1]
    assert curves.ap50[1] == 0.0
    assert np.all(curves.recall[1] == 0.0) and np.all(curves.precision[1] == 0.0)
    assert curves.f1[0, at[0.65]] == pytest.approx(0.8)
    conf, best = curves.best_f1()  # the mean over both classes peaks where class 0's does
    assert best == pytest.approx(0.4)
    assert 0.6 < conf <= 0.7


def test_confusion_matrix_counts_misclassified_missed_and_spurious_boxes() -> None:
    diag = DetectionDiagnostics(num_classes=2)
    a, b, c = _box(0, 0), _box(50, 50), _box(100, 100)
    diag.add(
        det_boxes=[a, _box(0, 1), b, _box(300, 300), c],
        det_scores=[0.9, 0.6, 0.8, 0.5, 0.2],  # the last is below the matrix's 0.25
        det_labels=[0, 0, 0, 1, 1],
        gt_boxes=[a, b, c],
        gt_labels=[0, 1, 1],
    )
    # rows predicted (0, 1, background), columns true
    expected = [
        [1, 1, 1],  # a right; b called 0; the duplicate on a is a spurious 0
        [0, 0, 1],  # the far box is a spurious 1
        [0, 1, 0],  # c missed (its detection scored 0.2)
    ]
    assert diag.matrix.tolist() == expected
    normalised = per_true_class(diag.matrix)
    assert normalised[:, 1].tolist() == pytest.approx([0.5, 0.0, 0.5])
    assert normalised.sum(0).tolist() == pytest.approx([1.0, 1.0, 1.0])


def test_rotated_boxes_are_matched_by_polygon_iou_not_their_envelopes() -> None:
    bar = [50.0, 50.0, 40.0, 4.0, math.pi / 4]
    crossing = [50.0, 50.0, 40.0, 4.0, -math.pi / 4]  # same envelope, perpendicular bar
    diag = DetectionDiagnostics(num_classes=1, rotated=True)
    diag.add([bar, crossing], [0.9, 0.8], [0, 0], [bar], [0])
    diag.add([crossing], [0.9], [0], [bar], [0])
    curves = diag.curves()
    assert curves.recall[0, 0] == pytest.approx(0.5)  # one of two bars found
    assert curves.precision[0, 0] == pytest.approx(1 / 3)
    assert diag.matrix.tolist() == [[1, 2], [1, 0]]


def test_eighty_classes_with_long_names_draw_at_their_sizes(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    diag = DetectionDiagnostics(num_classes=80)
    corners = rng.uniform(0, 300, (200, 2))
    boxes = np.concatenate([corners, corners + 20], 1)
    labels = rng.integers(0, 80, 200)
    diag.add(boxes + rng.normal(0, 2, boxes.shape), rng.uniform(0, 1, 200), labels, boxes, labels)
    names = [f"a rather long class name {c}" for c in range(80)]
    for path in write_curve_plots(diag.curves(), names, tmp_path):
        assert Image.open(path).size == CURVE_SIZE
    for path in write_confusion_matrices(diag, names, tmp_path):
        assert Image.open(path).size == confusion_size(80) == (2400, 2400)


def _record(w: int, h: int, boxes: list[list[float]], **extra: Any) -> ImageRecord:
    n = len(boxes)
    targets = Targets(
        np.asarray(boxes, np.float32).reshape(n, 4), np.arange(n, dtype=np.int64), **extra
    )
    return ImageRecord(image_id=1, path=Path("x.png"), height=h, width=w, targets=targets)


def test_label_statistics_are_relative_to_each_image_and_use_rotated_boxes() -> None:
    stats = label_statistics([_record(200, 100, [[0, 0, 50, 20]]), _record(100, 100, [])])
    assert stats.images == 2
    assert stats.centres == pytest.approx(np.array([[0.125, 0.1]]))
    assert stats.sizes == pytest.approx(np.array([[0.25, 0.2]]))
    rboxes = np.array([[50, 40, 30, 10, 0.5]], np.float32)
    obb = label_statistics([_record(100, 80, [[30, 30, 70, 50]], rboxes=rboxes)])
    assert obb.centres == pytest.approx(np.array([[0.5, 0.5]]))
    assert obb.sizes == pytest.approx(np.array([[0.3, 0.125]]))


def test_summary_names_the_best_epoch_of_the_monitored_metric() -> None:
    series = {
        "val/mAP50-95": [(0, 0.1), (1, 0.3), (2, 0.2)],
        "val/e2e/mAP50": [(2, 0.5)],
        "val/e2e/mAP50-95": [(2, 0.2)],
    }
    facts = dict(summary_facts(series))
    assert facts["best val/mAP50-95 (e2e box)"] == "0.3000 at epoch 1"
    assert facts["last val/mAP50-95"] == "0.2000 at epoch 2"
    assert facts["e2e box mAP50 / 50-95"] == "0.5000 / 0.2000"


def test_truth_records_hold_each_images_instances_and_canvas_masks(
    small_synthetic: Callable[[str], Path],
) -> None:
    dm = LucidDataModule("segment", small_synthetic("segment"), img_size=64, batch_size=4,
                         num_workers=0)  # fmt: skip
    dm.setup("validate")
    batch = next(iter(dm.val_dataloader()))
    records = truth_records(batch, 3)
    counts = batch.counts().tolist()
    assert [len(r["labels"]) for r in records] == counts[:3]
    for rec in records:
        assert rec["masks"].shape == (len(rec["labels"]), 64, 64)
        for mask, box in zip(rec["masks"], rec["boxes"], strict=True):
            _, xs = np.nonzero(mask)
            assert xs.size  # every instance has pixels, inside its box (one stride-4 cell slack)
            assert xs.min() >= box[0] - 4 and xs.max() <= box[2] + 4


def _tensorboard_scalars(folder: Path) -> set[str]:
    """Tags of the scalar summaries in the event files under ``folder`` (TFRecord framing:
    length, its CRC, the Event proto, its CRC)."""
    from tensorboardX.proto.event_pb2 import Event

    tags: set[str] = set()
    for path in folder.rglob("events.out.tfevents.*"):
        data, at = path.read_bytes(), 0
        while at + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = Event.FromString(data[at + 12 : at + 12 + length])
            tags.update(v.tag for v in event.summary.value)
            at += 12 + length + 4
    return tags


@pytest.mark.slow
def test_a_fit_writes_every_figure_at_its_size_and_tensorboard_beside_the_csv(
    small_synthetic: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.pytorch.loggers import TensorBoardLogger

    logged: list[Any] = []
    original = TensorBoardLogger.log_metrics

    def record(self: TensorBoardLogger, metrics: dict[str, Any], step: int | None = None) -> None:
        logged.extend(metrics.values())
        original(self, metrics, step)

    monkeypatch.setattr(TensorBoardLogger, "log_metrics", record)
    L.seed_everything(0)
    dm = LucidDataModule("detect", small_synthetic("detect"), img_size=64, batch_size=4,
                         num_workers=0)  # fmt: skip
    dm.setup("fit")
    s = dm.schema
    module = module_class("detect")(
        num_classes=s.num_classes, class_names=s.class_names, category_ids=s.category_ids,
        img_size=64,
    )  # fmt: skip
    trainer = build_trainer(
        tmp_path, max_epochs=1, limit_train_batches=1, limit_val_batches=2,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(module, datamodule=dm)

    images = min(4, len(dm.split_index("val").records))
    sizes = {
        "labels.png": (3 * LABEL_PANEL[0], LABEL_PANEL[1]),
        **dict.fromkeys(("PR_curve.png", "F1_curve.png", "P_curve.png", "R_curve.png"), CURVE_SIZE),
        "confusion_matrix.png": confusion_size(s.num_classes),
        "confusion_matrix_normalized.png": confusion_size(s.num_classes),
        "val_mosaic.jpg": mosaic_size(images),
        "results_summary.png": SUMMARY_SIZE,
    }
    assert set(sizes) == set(REPORT_FILES)
    for name, size in sizes.items():
        with Image.open(tmp_path / name) as im:
            im.verify()
        with Image.open(tmp_path / name) as im:
            assert (im.format, im.size) == ("JPEG" if name.endswith(".jpg") else "PNG", size), name
            assert im.convert("L").getextrema()[0] < 128, f"{name} is blank"
    assert not list(tmp_path.glob(".*.tmp*")), "a temporary file was left behind"

    # TensorBoard holds the CSV's metrics; its logger is handed numbers, never device tensors
    columns = set(read_rows(tmp_path / "metrics.csv")[0]) - {"epoch", "step"}
    assert columns and columns <= _tensorboard_scalars(tmp_path / "tensorboard")
    assert logged and all(isinstance(v, int | float) for v in logged)


def test_without_a_tensorboard_writer_the_run_keeps_its_csv_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch preinstalled with our packages on the path (the GPU machine) has no tensorboardX:
    the fit logs to metrics.csv alone, with one line saying why, instead of failing."""
    import importlib.util

    from lucid_train.report.metrics_log import RunCSVLogger
    from lucid_train.run.trainer import build_loggers

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("tensorboardX", "tensorboard") else real(name, *a),
    )
    loggers = build_loggers(tmp_path)
    assert [type(lg) for lg in loggers] == [RunCSVLogger]
    assert "no TensorBoard events" in capsys.readouterr().err


def test_validation_figures_are_drawn_at_most_every_interval_and_the_last_at_fit_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validations at 0, 10, 20, 31 and 40 s: the first and the one 31 s after it are drawn
    when they end, the one at 40 s at fit end (the run's final figures are its last
    validation's); a second fit end draws nothing again."""
    import types

    import lucid_train.report.run_report as run_report
    import lucid_train.report.validation_curves as validation_curves

    clock = [0.0]
    monkeypatch.setattr(run_report.time, "monotonic", lambda: clock[0])
    drawn: list[Any] = []
    monkeypatch.setattr(validation_curves, "write_curve_plots", lambda c, n, d: drawn.append(c))
    monkeypatch.setattr(validation_curves, "write_confusion_matrices", lambda *a: None)
    monkeypatch.setattr(RunReport, "_summary", lambda *a: None)
    trainer = types.SimpleNamespace(is_global_zero=True, sanity_checking=False, loggers=[])
    module = types.SimpleNamespace(hparams={"class_names": ["a"]}, overlay_samples=[])
    report = RunReport(tmp_path)
    for t in (0.0, 10.0, 20.0, DRAW_INTERVAL_S + 1, 40.0):
        clock[0] = t
        matched = types.SimpleNamespace(curves=lambda t=t: f"curves at {t:g}")
        report.diagnostics = types.SimpleNamespace(build=lambda m=matched: m)
        report.on_validation_epoch_end(trainer, module)  # type: ignore[arg-type]
    assert drawn == ["curves at 0", "curves at 31"]
    report.on_fit_end(trainer, module)  # type: ignore[arg-type]
    report.on_fit_end(trainer, module)  # type: ignore[arg-type]
    assert drawn == ["curves at 0", "curves at 31", "curves at 40"]


def test_pending_diagnostics_match_as_each_image_added_with_the_score_floor() -> None:
    """A validation held as host arrays and matched when drawn gives the statistics of adding
    each image's detections above the floor as they came (the figures do not change)."""
    import types

    import torch

    from lucid_train.report.run_report import PendingDiagnostics

    g = torch.Generator().manual_seed(0)
    xy = torch.rand(2, 6, 2, generator=g) * 50
    boxes = torch.cat((xy, xy + 5 + torch.rand(2, 6, 2, generator=g) * 20), -1)
    scores = torch.rand(2, 6, generator=g)
    labels = torch.randint(0, 2, (2, 6), generator=g)
    labels[1, 4:] = -1  # padding rows
    det = types.SimpleNamespace(boxes=boxes, scores=scores, labels=labels, rotated=None)
    owner = torch.tensor([0, 0, 0, 1, 1])
    truth = boxes[owner, torch.tensor([0, 1, 2, 0, 3])] + 1.0
    batch = types.SimpleNamespace(
        boxes=truth, labels=torch.tensor([0, 1, 1, 0, 1]), batch_idx=owner,
        difficult=torch.zeros(5, dtype=torch.bool), rboxes=torch.zeros(5, 5),
    )  # fmt: skip
    pending = PendingDiagnostics(2, rotated=False, floor=0.2)
    pending.add_batch(det, batch)  # type: ignore[arg-type]
    direct = DetectionDiagnostics(num_classes=2)
    for i in range(2):
        keep = (labels[i] >= 0) & (scores[i] > 0.2)
        sel = owner == i
        direct.add(boxes[i][keep], scores[i][keep], labels[i][keep], truth[sel],
                   batch.labels[sel], batch.difficult[sel])  # fmt: skip
    built = pending.build()
    assert built.images == direct.images == 2
    np.testing.assert_array_equal(built.matrix, direct.matrix)
    a, b = built.curves(), direct.curves()
    np.testing.assert_array_equal(a.ap50, b.ap50)
    assert built.matrix.sum() > 0
