"""Loss and metric curves as PNG, drawn with Pillow from the run's CSV log.

Lightning's CSVLogger writes one sparse row per logging call (``epoch``, ``step`` and whichever
metrics were logged then). `read_epoch_series` folds it into one value per epoch per metric;
`plot_curves` draws a grid of small line charts, one per metric.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from PIL import Image, ImageDraw

from lucid_train.atomic_files import save_image
from lucid_train.report.metrics_log import read_rows

__all__ = ["plot_curves", "read_epoch_series", "write_run_plots"]

PANEL = (320, 200)
MARGIN = 34


def read_epoch_series(csv_path: Path) -> dict[str, list[tuple[int, float]]]:
    """``{metric: [(epoch, value), ...]}`` from a CSVLogger ``metrics.csv`` (the last value
    logged in each epoch; per-step columns ``*_step`` are left out). An incomplete last line
    (a run killed mid-append) is not read."""
    series: dict[str, dict[int, float]] = {}
    for row in read_rows(csv_path)[1]:
        if not row.get("epoch"):
            continue
        epoch = int(float(row["epoch"]))
        for key, value in row.items():
            if key in ("epoch", "step") or not value or key.endswith("_step"):
                continue
            series.setdefault(key.removesuffix("_epoch"), {})[epoch] = float(value)
    return {k: sorted(v.items()) for k, v in sorted(series.items())}


def _panel(name: str, points: Sequence[tuple[int, float]]) -> Image.Image:
    w, h = PANEL
    img = Image.new("RGB", PANEL, "white")
    draw = ImageDraw.Draw(img)
    draw.text((MARGIN, 4), name, fill="black")
    finite = [(x, y) for x, y in points if math.isfinite(y)]
    box = (MARGIN, 20, w - 8, h - 20)
    draw.rectangle(box, outline=(160, 160, 160))
    if not finite:
        return img
    xs, ys = [p[0] for p in finite], [p[1] for p in finite]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = min(ys), max(ys)
    if y1 - y0 < 1e-12:
        y0, y1 = y0 - 0.5, y1 + 0.5
    draw.text((2, box[1]), f"{y1:.3g}", fill="black")
    draw.text((2, box[3] - 10), f"{y0:.3g}", fill="black")
    draw.text((box[0], box[3] + 4), f"epoch {x0}", fill="black")
    draw.text((box[2] - 50, box[3] + 4), f"{x1}", fill="black")

    def to_px(x: float, y: float) -> tuple[float, float]:
        return (
            box[0] + (x - x0) / (x1 - x0) * (box[2] - box[0]),
            box[3] - (y - y0) / (y1 - y0) * (box[3] - box[1]),
        )

    pts = [to_px(x, y) for x, y in finite]
    if len(pts) > 1:
        draw.line(pts, fill=(30, 90, 200), width=2)
    for px, py in pts:
        draw.ellipse([px - 2, py - 2, px + 2, py + 2], fill=(30, 90, 200))
    return img


def plot_curves(series: dict[str, list[tuple[int, float]]], path: Path, columns: int = 3) -> Path:
    """Draw one panel per metric of ``series`` into the PNG ``path`` (a blank panel when there is
    nothing to draw); written atomically."""
    names = list(series) or ["(no values yet)"]
    rows = math.ceil(len(names) / columns)
    sheet = Image.new("RGB", (PANEL[0] * columns, PANEL[1] * rows), "white")
    for i, name in enumerate(names):
        panel = _panel(name, series.get(name, []))
        sheet.paste(panel, ((i % columns) * PANEL[0], (i // columns) * PANEL[1]))
    return save_image(sheet, path)


def write_run_plots(csv_path: Path, out_dir: Path) -> list[Path]:
    """``losses.png`` (``train/*``) and ``metrics.png`` (``val/*``) from a run's CSV log."""
    series = read_epoch_series(csv_path) if csv_path.exists() else {}
    losses = {k: v for k, v in series.items() if k.startswith("train/")}
    metrics = {k: v for k, v in series.items() if k.startswith("val/")}
    return [
        plot_curves(losses, out_dir / "losses.png"),
        plot_curves(metrics, out_dir / "metrics.png"),
    ]
