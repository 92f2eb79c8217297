"""`RunReport`: the figures Ultralytics users look for in a run folder, as one Lightning callback.

Written into the run folder, on rank 0, atomically::

    labels.png                               # at fit start: class histogram, box centres, sizes
    PR_curve.png F1_curve.png P_curve.png R_curve.png    # of a validation epoch (IoU 0.5)
    confusion_matrix.png confusion_matrix_normalized.png # of a validation epoch
    val_mosaic.jpg                           # ground truth beside predictions, first images
    results_summary.png                      # with the curves, and at fit end

The validation figures are drawn after the first validation, after any validation at least
`DRAW_INTERVAL_S` after the last drawing, and at fit end from the last validation if it was not
drawn: a run's final figures are its last validation's, as when every epoch drew them. Drawing
them took about 0.3 s of the training process a validation (CPU, yolo26n, 64 images), between
two epochs of a fit whose epochs train in seconds.

The curves and the matrix come from the end-to-end decode (the deploy path, as the overlays and
the monitored metric, assumptions.md T52/T59) of the validation epoch just run, on the EMA
weights, in canvas pixels (letterboxing changes no IoU). The module's ``validation_step`` hands
its decode to `on_validation_batch_end` (``{"e2e": Detections}``); this callback copies the
batch's detections and ground truth to the host once per batch (`PendingDiagnostics`), and
matches them image by image only when that validation is drawn: most are not, and matching
every validation cost an eighth of it (256 images, H100, docs/benchmarks/epoch-overhead.md).
Training steps are untouched: nothing here runs per training batch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import Callback

from lucid_models import Detections
from lucid_train.atomic_files import save_image
from lucid_train.data.transport import Batch
from lucid_train.evaluation.detection_curves import CurveSet, DetectionDiagnostics

__all__ = ["DRAW_INTERVAL_S", "MOSAIC_IMAGES", "REPORT_FILES", "PendingDiagnostics", "RunReport"]

DRAW_INTERVAL_S = 30.0  # validation figures are redrawn at most this often (and at fit end)
MOSAIC_IMAGES = 4  # the module keeps predictions of its first 4 validation images (OVERLAY_IMAGES)
REPORT_FILES = (
    "labels.png",
    "PR_curve.png",
    "F1_curve.png",
    "P_curve.png",
    "R_curve.png",
    "confusion_matrix.png",
    "confusion_matrix_normalized.png",
    "val_mosaic.jpg",
    "results_summary.png",
)


class PendingDiagnostics:
    """A validation's detections and ground truth as host arrays, batch by batch, matched into
    `DetectionDiagnostics` by `build` (when the validation is drawn).

    Args:
        num_classes: contiguous labels ``0 .. C-1``.
        rotated: boxes are ``(cx, cy, w, h, theta)``.
        floor: detections scoring at or below it are left out (the validation score floor).
    """

    def __init__(self, num_classes: int, rotated: bool, floor: float) -> None:
        self.num_classes, self.rotated, self.floor = num_classes, rotated, floor
        self.batches: list[tuple[np.ndarray, ...]] = []

    def add_batch(self, det: Detections, batch: Batch) -> None:
        """One validation batch's e2e detections (padded ``(B, K, ...)``) and its targets."""
        if self.rotated:
            if det.rotated is None:
                raise ValueError("obb validation decoded no rotated boxes")
            geometry, gt = det.rotated.cpu().numpy(), batch.rboxes.cpu().numpy()
        else:
            geometry, gt = det.boxes.cpu().numpy(), batch.boxes.cpu().numpy()
        self.batches.append((
            geometry, det.scores.cpu().numpy(), det.labels.cpu().numpy(), gt,
            batch.labels.cpu().numpy(), batch.difficult.cpu().numpy(),
            batch.batch_idx.cpu().numpy(),
        ))  # fmt: skip

    def build(self) -> DetectionDiagnostics:
        """Every image matched: the curves' and the confusion matrix's statistics."""
        diagnostics = DetectionDiagnostics(self.num_classes, rotated=self.rotated)
        for geometry, scores, labels, gt, gt_labels, gt_difficult, owner in self.batches:
            for i in range(len(geometry)):
                keep = (labels[i] >= 0) & (scores[i] > self.floor)
                sel = owner == i
                diagnostics.add(
                    geometry[i][keep], scores[i][keep], labels[i][keep],
                    gt[sel], gt_labels[sel], gt_difficult[sel],
                )  # fmt: skip
        return diagnostics


class RunReport(Callback):
    """Label statistics, validation curves, confusion matrices, mosaic and summary of a fit.

    Args:
        run_dir: the run folder (``runs/<task>/<name>``).
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.diagnostics: PendingDiagnostics | None = None
        self.curves: CurveSet | None = None
        self._truths: list[dict[str, Any]] = []
        self._drawn_at: float | None = None
        # the last validation's diagnostics, truths and predictions while not yet drawn
        self._undrawn: tuple[PendingDiagnostics, list[Any], list[Any]] | None = None

    @staticmethod
    def _active(trainer: L.Trainer) -> bool:
        return trainer.is_global_zero and not trainer.sanity_checking

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        dm = getattr(trainer, "datamodule", None)
        if dm is None or not hasattr(dm, "split_index"):
            return
        from lucid_train.report.label_stats import label_statistics, write_label_plots

        index = dm.split_index("train")
        stats = label_statistics(index.records)
        write_label_plots(stats, index.schema.class_names, self.run_dir / "labels.png")

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.diagnostics, self._truths = None, []
        if self._active(trainer):
            task = getattr(pl_module, "task", "detect")
            nc = int(pl_module.hparams.get("num_classes", 0))
            settings = getattr(pl_module, "decode_settings", None)
            floor = float(getattr(settings, "score_threshold", 0.0))
            self.diagnostics = PendingDiagnostics(nc, rotated=task == "obb", floor=floor)

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
        batch_idx: int, dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        det = outputs.get("e2e") if isinstance(outputs, dict) else None
        if self.diagnostics is None or not isinstance(det, Detections):
            return
        if not isinstance(batch, Batch):
            return
        from lucid_train.report.val_mosaic import truth_records

        if len(self._truths) < MOSAIC_IMAGES:
            self._truths.extend(truth_records(batch, MOSAIC_IMAGES - len(self._truths)))
        self.diagnostics.add_batch(det, batch)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.diagnostics is None or not self._active(trainer):
            return
        predictions = list(getattr(pl_module, "overlay_samples", []))
        self._undrawn = (self.diagnostics, self._truths, predictions)
        self._truths = []
        if self._drawn_at is None or time.monotonic() - self._drawn_at >= DRAW_INTERVAL_S:
            self._draw(trainer, pl_module)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        if self._undrawn is not None:
            self._draw(trainer, pl_module)  # the last validation's figures
        self._summary(trainer, pl_module)

    def _draw(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The figures of the last validation not yet drawn, and the summary with them."""
        from lucid_train.report.val_mosaic import draw_val_mosaic
        from lucid_train.report.validation_curves import write_confusion_matrices, write_curve_plots

        assert self._undrawn is not None
        pending, truths, predictions = self._undrawn
        self._undrawn, self._drawn_at = None, time.monotonic()
        diagnostics = pending.build()
        names = list(pl_module.hparams.get("class_names", ()))
        self.curves = diagnostics.curves()
        write_curve_plots(self.curves, names, self.run_dir)
        write_confusion_matrices(diagnostics, names, self.run_dir)
        if truths and predictions:
            skeleton = list(pl_module.hparams.get("skeleton", ()))
            mosaic = draw_val_mosaic(truths, predictions, names, skeleton)
            save_image(mosaic, self.run_dir / "val_mosaic.jpg", quality=90)
        self._summary(trainer, pl_module)

    def _summary(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from lightning.pytorch.loggers import CSVLogger

        from lucid_train.report.summary_page import write_summary

        csv_path = self.run_dir / "metrics.csv"
        for logger in trainer.loggers:
            if isinstance(logger, CSVLogger):
                logger.save()  # the epoch's rows on disk before they are read
                csv_path = Path(logger.log_dir) / "metrics.csv"
        hp = pl_module.hparams
        heading = f"{self.run_dir.name}: {hp.get('model', '?')} {getattr(pl_module, 'task', '')}"
        write_summary(
            self.run_dir / "results_summary.png",
            heading=heading,
            csv_path=csv_path,
            curves=self.curves,
            class_names=list(hp.get("class_names", ())),
            figures=[
                self.run_dir / "PR_curve.png",
                self.run_dir / "F1_curve.png",
                self.run_dir / "confusion_matrix_normalized.png",
            ],
        )
