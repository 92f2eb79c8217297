"""The validation figures of a run: PR, F1, precision and recall curves, confusion matrices.

Drawn from `lucid_train.evaluation.detection_curves` with `lucid_train.report.charts` and written
atomically as PNG into the run folder (assumptions.md T75, T76)::

    PR_curve.png  F1_curve.png  P_curve.png  R_curve.png
    confusion_matrix.png  confusion_matrix_normalized.png

Per-class lines are named in the legend up to `LEGEND_CLASSES` classes (thin grey lines beyond);
the thick line is the mean over classes with ground truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from lucid_train.atomic_files import save_image
from lucid_train.evaluation.detection_curves import CurveSet, DetectionDiagnostics
from lucid_train.report.charts import Series, heat_map, line_chart

__all__ = [
    "CLASS_COLOURS",
    "CURVE_FILES",
    "CURVE_SIZE",
    "confusion_size",
    "per_true_class",
    "write_confusion_matrices",
    "write_curve_plots",
]

CURVE_SIZE = (900, 640)
LEGEND_CLASSES = 12
NAME_CHARS = 20  # longer class names are cut on the axes and in legends
# Well-separated line colours on white (the common ten-colour cycle).
CLASS_COLOURS = [
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
]  # fmt: skip
MEAN_COLOUR = (20, 40, 120)
CURVE_FILES = ("PR_curve.png", "F1_curve.png", "P_curve.png", "R_curve.png")


def _class_series(
    x: npt.NDArray[np.float64],
    curves: npt.NDArray[np.float64],
    valid: npt.NDArray[np.bool_],
    names: Sequence[str],
    values: Sequence[str],
) -> list[Series]:
    count = int(valid.sum())
    out = []
    for i, c in enumerate(np.flatnonzero(valid).tolist()):
        if count <= LEGEND_CLASSES:
            colour = CLASS_COLOURS[c % len(CLASS_COLOURS)]
            out.append(Series(x, curves[c], f"{names[c]} {values[c]}", colour, width=2))
        else:  # one grey legend entry for them all
            label = f"each of {count} classes" if i == 0 else None
            out.append(Series(x, curves[c], label, (190, 190, 190), width=1))
    return out


def _name(names: Sequence[str], c: int) -> str:
    name = names[c] if c < len(names) else str(c)
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"


def write_curve_plots(curves: CurveSet, class_names: Sequence[str], out_dir: Path) -> list[Path]:
    """The four curve PNGs (`CURVE_FILES`) of ``curves`` in ``out_dir``."""
    names = [_name(class_names, c) for c in range(curves.ap50.size)]
    valid = curves.valid
    conf, best_f1 = curves.best_f1()
    mean_ap = float(np.nanmean(curves.ap50[valid])) if valid.any() else float("nan")
    figures = {
        "PR_curve.png": (
            curves.pr_recall, curves.pr_precision, [f"{v:.3f}" for v in curves.ap50],
            f"all classes {mean_ap:.3f} mAP50", "Precision-recall (IoU 0.5)", "Recall",
            "Precision", "lower left",
        ),
        "F1_curve.png": (
            curves.confidence, curves.f1, [""] * len(names),
            f"all classes {best_f1:.2f} at {conf:.3f}", "F1 over confidence (IoU 0.5)",
            "Confidence", "F1", "lower left",
        ),
        "P_curve.png": (
            curves.confidence, curves.precision, [""] * len(names), "all classes",
            "Precision over confidence (IoU 0.5)", "Confidence", "Precision", "lower right",
        ),
        "R_curve.png": (
            curves.confidence, curves.recall, [""] * len(names), "all classes",
            "Recall over confidence (IoU 0.5)", "Confidence", "Recall", "upper right",
        ),
    }  # fmt: skip
    paths = []
    for file, (x, y, values, mean_label, title, xlabel, ylabel, corner) in figures.items():
        series = _class_series(x, y, valid, names, values)
        series.append(Series(x, curves.mean(y), mean_label, MEAN_COLOUR, width=4))
        img = line_chart(
            series, size=CURVE_SIZE, title=title, xlabel=xlabel, ylabel=ylabel,
            xlim=(0.0, 1.0), ylim=(0.0, 1.0), legend=corner,
        )  # fmt: skip
        path = out_dir / file
        paths.append(save_image(img, path))
    return paths


def confusion_size(num_classes: int) -> tuple[int, int]:
    """Pixel size of the confusion-matrix PNGs for ``num_classes`` (plus background)."""
    side = min(max(260 + 48 * (num_classes + 1), 640), 2400)
    return side, side


def per_true_class(matrix: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """``matrix`` [predicted, true] with each true class's column divided by its sum (a column
    without ground truth stays 0): the diagonal reads as recall."""
    m = matrix.astype(np.float64)
    columns = m.sum(0, keepdims=True)
    out: npt.NDArray[np.float64] = np.divide(m, columns, out=np.zeros_like(m), where=columns > 0)
    return out


def write_confusion_matrices(
    diagnostics: DetectionDiagnostics, class_names: Sequence[str], out_dir: Path
) -> list[Path]:
    """``confusion_matrix.png`` (counts) and ``confusion_matrix_normalized.png`` (each true
    class's column sums to 1) in ``out_dir``; rows are predicted classes."""
    m = diagnostics.matrix.astype(np.float64)
    nc = diagnostics.num_classes
    names = [_name(class_names, c) for c in range(nc)] + ["background"]
    size = confusion_size(nc)
    many = nc > 30
    subtitle = f"score > {diagnostics.confusion_conf:g}, IoU > {diagnostics.confusion_iou:g}"
    normalised = per_true_class(diagnostics.matrix)
    paths = []
    for file, values, fmt, title in (
        ("confusion_matrix.png", m, "{:.0f}", "Confusion matrix (counts)"),
        ("confusion_matrix_normalized.png", normalised, "{:.2f}", "Confusion matrix (per true)"),
    ):
        img = heat_map(
            values, size=size, title=title, xlabel=f"True  ({subtitle})", ylabel="Predicted",
            col_names=names, row_names=names, number_format=fmt, show_numbers=not many,
        )  # fmt: skip
        path = out_dir / file
        paths.append(save_image(img, path))
    return paths
