"""The one-page results summary of a run (``results_summary.png``).

Left: the run (task, model, epochs), the best and the last validation of the monitored metric,
the last epoch's box (and mask / pose) mAPs of both decode paths, the training speed, and a
per-class table (instances, precision and recall at the confidence of best mean F1, AP50 at IoU
0.5). Right: four figures, the mAP curves over epochs, the PR and F1 curves and the normalised
confusion matrix, each scaled into its cell (assumptions.md T79).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from lucid_train.atomic_files import save_image
from lucid_train.evaluation.detection_curves import CurveSet
from lucid_train.report.charts import Series, font, line_chart, nice_ticks
from lucid_train.report.training_curves import read_epoch_series
from lucid_train.report.validation_curves import CLASS_COLOURS

__all__ = ["SUMMARY_SIZE", "map_curves", "summary_facts", "write_summary"]

SUMMARY_SIZE = (1800, 1120)
TEXT_WIDTH = 600
CELL = ((SUMMARY_SIZE[0] - TEXT_WIDTH) // 2, (SUMMARY_SIZE[1] - 40) // 2)
TABLE_ROWS = 20


def map_curves(series: dict[str, list[tuple[int, float]]], size: tuple[int, int]) -> Image.Image:
    """mAP50-95 and mAP50 of both decode paths over epochs (box, or rotated for obb)."""
    lines, last, peak = [], 1, 0.1
    for i, key in enumerate(("e2e/mAP50-95", "nms/mAP50-95", "e2e/mAP50", "nms/mAP50")):
        points = series.get(f"val/{key}", [])
        if points:
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            lines.append(Series(xs, ys, key, CLASS_COLOURS[i], width=3, points=True))
            last, peak = max(last, *xs), max(peak, *ys)
    return line_chart(
        lines, size=size, title="Validation mAP over epochs", xlabel="Epoch", ylabel="mAP",
        xlim=(0.0, float(last)), ylim=(0.0, peak * 1.1), legend="upper left",
        xticks=[t for t in nice_ticks(0, last) if t == int(t)],
    )  # fmt: skip


def _last(series: dict[str, list[tuple[int, float]]], key: str) -> float | None:
    points = series.get(key)
    return points[-1][1] if points else None


def summary_facts(series: dict[str, list[tuple[int, float]]]) -> list[tuple[str, str]]:
    """``(label, value)`` lines of a run's epoch series
    (`lucid_train.report.training_curves.read_epoch_series`)."""
    facts: list[tuple[str, str]] = []
    monitored = series.get("val/mAP50-95", [])
    if monitored:
        best_epoch, best = max(monitored, key=lambda p: (p[1], -p[0]))
        facts.append(("best val/mAP50-95 (e2e box)", f"{best:.4f} at epoch {best_epoch}"))
        facts.append(("last val/mAP50-95", f"{monitored[-1][1]:.4f} at epoch {monitored[-1][0]}"))
    for path in ("e2e", "nms"):
        for kind, label in (("", "box"), ("mask_", "mask"), ("pose_", "pose")):
            key = f"val/{path}/{kind}mAP50"
            m50, m = _last(series, key), _last(series, f"{key}-95")
            if m is not None and m50 is not None:
                facts.append((f"{path} {label} mAP50 / 50-95", f"{m50:.4f} / {m:.4f}"))
    loss = _last(series, "train/loss")
    if loss is not None:
        facts.append(("last train/loss", f"{loss:.4f}"))
    speed = _last(series, "time/train_images_per_s")
    if speed is not None:
        facts.append(("training speed (last epoch)", f"{speed:.1f} images/s"))
    return facts


def _class_table(curves: CurveSet | None, names: Sequence[str]) -> list[tuple[str, ...]]:
    if curves is None:
        return []
    conf, _ = curves.best_f1()
    rows: list[tuple[str, ...]] = [("class", "instances", "P", "R", "AP50")]
    at = int(np.argmin(np.abs(curves.confidence - conf))) if math.isfinite(conf) else 0
    order = np.argsort(-curves.instances, kind="stable")[:TABLE_ROWS]
    for c in order.tolist():
        name = names[c] if c < len(names) else str(c)
        if curves.instances[c] == 0:
            rows.append((name[:18], "0", "-", "-", "-"))
            continue
        rows.append((name[:18], str(int(curves.instances[c])), f"{curves.precision[c, at]:.3f}",
                     f"{curves.recall[c, at]:.3f}", f"{curves.ap50[c]:.3f}"))  # fmt: skip
    return rows


def write_summary(
    path: Path,
    *,
    heading: str,
    csv_path: Path,
    curves: CurveSet | None,
    class_names: Sequence[str],
    figures: Sequence[Path],
) -> Path:
    """Draw the summary page at ``path`` (`SUMMARY_SIZE`), written atomically.

    Args:
        heading: the first line (run name, task, model).
        csv_path: the run's ``metrics.csv``.
        curves: the last validation's curves (per-class table), or None.
        class_names: one name per class.
        figures: up to three PNGs placed after the mAP curves (missing files are left blank).
    """
    series = read_epoch_series(csv_path) if csv_path.exists() else {}
    page = Image.new("RGB", SUMMARY_SIZE, "white")
    draw = ImageDraw.Draw(page)
    draw.text((20, 16), heading, fill="black", font=font(24))
    epochs = max((p[0] for s in series.values() for p in s), default=-1) + 1
    y = 56
    for label, value in [("epochs logged", str(epochs)), *summary_facts(series)]:
        draw.text((20, y), label, fill=(70, 70, 70), font=font(15))
        draw.text((TEXT_WIDTH - 20, y), value, fill="black", font=font(15), anchor="ra")
        y += 24
    y += 12
    table = _class_table(curves, class_names)
    if table:
        conf, f1 = curves.best_f1() if curves is not None else (math.nan, math.nan)
        draw.text((20, y), f"per class at confidence {conf:.3f} (best mean F1 {f1:.3f}), IoU 0.5",
                  fill="black", font=font(15))  # fmt: skip
        y += 26
        columns = (20, 230, 330, 420, 510)
        for i, row in enumerate(table):
            for x, text in zip(columns, row, strict=True):
                draw.text((x, y), text, fill="black" if i else (70, 70, 70), font=font(14))
            y += 21
            if i == 0:
                draw.line([(20, y - 2), (TEXT_WIDTH - 20, y - 2)], fill=(170, 170, 170))
    cells = [map_curves(series, CELL)]
    for fig in list(figures)[:3]:
        if fig.is_file():
            with Image.open(fig) as im:
                cells.append(im.convert("RGB"))
        else:
            cells.append(Image.new("RGB", CELL, "white"))
    for i, cell in enumerate(cells):
        cell = cell.copy()
        cell.thumbnail(CELL)
        x = TEXT_WIDTH + (i % 2) * CELL[0] + (CELL[0] - cell.width) // 2
        top = 20 + (i // 2) * CELL[1] + (CELL[1] - cell.height) // 2
        page.paste(cell, (x, top))
    draw.line([(TEXT_WIDTH - 6, 20), (TEXT_WIDTH - 6, SUMMARY_SIZE[1] - 20)], fill=(200, 200, 200))
    return save_image(page, path)
