"""Label statistics of a training split: instances per class, box centres and box sizes.

`label_statistics` reads the split's annotations as loaded (source pixels, before any
augmentation; obb: the rotated box's own centre, width and height, long edge first), relative to
each image's size. `write_label_plots` draws them side by side into ``labels.png``: a bar per
class, the density of box centres over the image (top of the image at the top) and the density
of box widths against heights (assumptions.md T77).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from PIL import Image

from lucid_train.atomic_files import save_image
from lucid_train.data.records import ImageRecord
from lucid_train.report.charts import bar_chart, density_map
from lucid_train.report.validation_curves import CLASS_COLOURS

__all__ = ["LABEL_PANEL", "LabelStatistics", "label_statistics", "write_label_plots"]

LABEL_PANEL = (600, 520)


@dataclass(frozen=True)
class LabelStatistics:
    """Per instance, relative to its image: ``labels`` ``(N,)``, ``centres`` ``(N, 2)`` x, y and
    ``sizes`` ``(N, 2)`` w, h; ``images`` counts the images read."""

    labels: npt.NDArray[np.int64]
    centres: npt.NDArray[np.float64]
    sizes: npt.NDArray[np.float64]
    images: int


def label_statistics(records: Sequence[ImageRecord]) -> LabelStatistics:
    """Statistics of every instance of ``records`` (rotated boxes where the records have them)."""
    labels, centres, sizes = [], [], []
    for rec in records:
        t, scale = rec.targets, np.array([rec.width, rec.height], np.float64)
        if t.rboxes is not None:
            cxcy, wh = t.rboxes[:, :2].astype(np.float64), t.rboxes[:, 2:4].astype(np.float64)
        else:
            b = t.boxes.astype(np.float64)
            cxcy, wh = (b[:, :2] + b[:, 2:]) / 2, b[:, 2:] - b[:, :2]
        labels.append(t.labels)
        centres.append(cxcy / scale)
        sizes.append(wh / scale)
    return LabelStatistics(
        labels=np.concatenate(labels) if labels else np.zeros(0, np.int64),
        centres=np.concatenate(centres) if centres else np.zeros((0, 2)),
        sizes=np.concatenate(sizes) if sizes else np.zeros((0, 2)),
        images=len(records),
    )


def write_label_plots(stats: LabelStatistics, class_names: Sequence[str], path: Path) -> Path:
    """``labels.png`` (three `LABEL_PANEL` panels in a row) at ``path``, written atomically."""
    nc = len(class_names)
    counts = np.bincount(stats.labels, minlength=nc)[:nc] if nc else np.zeros(0, np.int64)
    n = int(stats.labels.size)
    panels = [
        bar_chart(
            counts.tolist(), list(class_names), size=LABEL_PANEL,
            title=f"Instances per class ({n} in {stats.images} images)", xlabel="Class",
            ylabel="Instances", colours=CLASS_COLOURS,
        ),
        density_map(
            stats.centres[:, 0], stats.centres[:, 1], size=LABEL_PANEL, title="Box centres",
            xlabel="x / image width", ylabel="y / image height (top = 0)", y_down=True,
        ),
        density_map(
            stats.sizes[:, 0], stats.sizes[:, 1], size=LABEL_PANEL, title="Box sizes",
            xlabel="width / image width", ylabel="height / image height",
        ),
    ]  # fmt: skip
    sheet = Image.new("RGB", (LABEL_PANEL[0] * len(panels), LABEL_PANEL[1]), "white")
    for i, panel in enumerate(panels):
        sheet.paste(panel, (i * LABEL_PANEL[0], 0))
    return save_image(sheet, path)
