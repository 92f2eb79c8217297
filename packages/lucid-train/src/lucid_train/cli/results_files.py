"""What ``lucid validate|test --save_json`` writes: the scored detections in the formats other
tools read, and the per-class AP table (assumptions.md T82).

For every decode path (``e2e``, ``nms``):

* detect, segment, pose: ``predictions_<path>.json``, a COCO results list (``image_id``,
  ``category_id`` as the dataset's ids, ``bbox`` as ``x, y, w, h`` in source pixels, ``score``,
  and ``segmentation`` as compressed RLE or ``keypoints`` as ``x, y, score`` triples). These are
  exactly the lists the validation scored: pycocotools' ``COCO.loadRes`` on the file and
  ``COCOeval`` give the printed numbers back (within 1e-12: validation's compiled scorer
  rounds one precision differently, `lucid_train.evaluation.coco_eval`).
* obb: ``dota_<path>/Task1_<class>.txt``, the DOTA devkit's task-1 results, one line per
  detection ``<image> <score> x1 y1 x2 y2 x3 y3 x4 y4`` (the image's file stem, corners in source
  pixels).

``per_class_ap.csv`` holds one row per class (its ground-truth instances, then AP50-95 and AP50 of
each path and metric); `format_per_class` prints the same table.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np

from lucid_train.atomic_files import atomic_path, write_text
from lucid_train.data.rotated import rbox_corners
from lucid_train.tasks.validation import DECODE_PATHS, PREFIX, ValidationScorer

__all__ = ["SaveResults", "format_per_class", "per_class_rows", "write_results"]

LABEL = {"bbox": "box", "segm": "mask", "keypoints": "pose", "rotated": "rbox"}


def _json_ready(det: dict[str, Any]) -> dict[str, Any]:
    out = dict(det)
    seg = out.get("segmentation")
    if isinstance(seg, dict) and isinstance(seg.get("counts"), bytes):
        out["segmentation"] = {"size": list(seg["size"]), "counts": seg["counts"].decode("ascii")}
    return out


def _number(x: float) -> str:
    return repr(float(x))  # shortest exact text: the file reads back to the same values


def per_class_rows(scorer: ValidationScorer) -> tuple[list[str], list[list[Any]]]:
    """The per-class table: header and rows ``[class, instances, AP50-95, AP50, ...]`` with one
    pair of columns per path and metric (NaN: no ground truth of that class)."""
    names = scorer.schema.class_names
    header = ["class", "instances"]
    columns: list[list[tuple[float, float]]] = []
    if scorer.task == "obb":
        counts = [0] * len(names)
        for image in scorer.rotated[DECODE_PATHS[0]].images:
            for label in image.gt_labels[~image.gt_difficult].tolist():
                counts[label] += 1
        for path in DECODE_PATHS:
            r = scorer.rotated_results.get(path) or scorer.rotated[path].compute()
            header += [f"{path}/rbox_AP50-95", f"{path}/rbox_AP50"]
            columns.append(
                [
                    (r.get(f"AP50-95/{c}", math.nan), r.get(f"AP50/{c}", math.nan))
                    for c in range(len(names))
                ]
            )
    else:
        assert scorer.coco is not None
        first = scorer.coco[DECODE_PATHS[0]]
        ids = scorer.schema.category_ids
        gt = first.gt
        counts = [len(gt.getAnnIds(catIds=[c], iscrowd=False)) for c in ids]
        for path in DECODE_PATHS:
            ev = scorer.coco[path]
            for iou_type in ev.iou_types:
                if iou_type not in ev.per_class:
                    ev.compute()
                table = ev.per_class[iou_type]
                label = PREFIX[iou_type] or "box_"
                header += [f"{path}/{label}AP50-95", f"{path}/{label}AP50"]
                columns.append([table.get(int(c), (math.nan, math.nan)) for c in ids])
    rows = []
    for i, name in enumerate(names):
        row: list[Any] = [name, counts[i]]
        for col in columns:
            row += [col[i][0], col[i][1]]
        rows.append(row)
    return header, rows


def format_per_class(header: list[str], rows: list[list[Any]]) -> str:
    """The table as console text (``-`` for NaN)."""
    width = max([len(h) for h in header[2:]] + [9])
    name_w = max([len(str(r[0])) for r in rows] + [5])
    lines = [
        f"{header[0]:<{name_w}} {header[1]:>9} " + " ".join(f"{h:>{width}}" for h in header[2:])
    ]
    for r in rows:
        cells = " ".join("-".rjust(width) if math.isnan(v) else f"{v:>{width}.4f}" for v in r[2:])
        lines.append(f"{r[0]:<{name_w}} {r[1]:>9} {cells}")
    return "\n".join(lines)


def write_results(scorer: ValidationScorer, out_dir: Path, images: dict[int, Path]) -> list[Path]:
    """Write the results files and the per-class table of a finished ``scorer`` under
    ``out_dir``; returns the files written. ``images``: the file of each image id (obb names
    its lines by the file's stem)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if scorer.task == "obb":
        names = scorer.schema.class_names
        for path in DECODE_PATHS:
            folder = out_dir / f"dota_{path}"
            folder.mkdir(exist_ok=True)
            lines: list[list[str]] = [[] for _ in names]
            for (image_id, (gain, px, py)), image in zip(
                scorer.obb_images, scorer.rotated[path].images, strict=True
            ):
                stem = images[image_id].stem if image_id in images else str(image_id)
                corners = rbox_corners(image.dt)  # (D, 4, 2) canvas pixels
                corners = (corners - np.array([px, py])) / gain
                for k in range(corners.shape[0]):
                    xy = " ".join(_number(v) for v in corners[k].reshape(-1))
                    lines[int(image.dt_labels[k])].append(
                        f"{stem} {_number(image.dt_scores[k])} {xy}\n"
                    )
            for c, name in enumerate(names):
                target = folder / f"Task1_{name.replace('/', '_')}.txt"
                written.append(write_text(target, "".join(lines[c])))
    else:
        assert scorer.coco is not None
        for path in DECODE_PATHS:
            target = out_dir / f"predictions_{path}.json"
            dets = [_json_ready(d) for d in scorer.coco[path].detections]
            written.append(write_text(target, json.dumps(dets)))
    header, rows = per_class_rows(scorer)
    table = out_dir / "per_class_ap.csv"
    with atomic_path(table) as tmp, tmp.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows([r[:2] + [f"{v:.6f}" for v in r[2:]] for r in rows])
    written.append(table)
    return written


class SaveResults(L.Callback):
    """After a validation or test run, write its results files and per-class table under
    ``out_dir`` and print the table (`write_results`). The module's scorer has computed its
    metrics by then (the module's epoch-end hook runs before ``on_validation_end``)."""

    def __init__(self, out_dir: str | Path) -> None:
        self.out_dir = Path(out_dir)
        self.written: list[Path] = []

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Make ``out_dir`` before the run: a folder that cannot be made (a file in the way, no
        permission) is said before the images are scored, not after."""
        if trainer.is_global_zero:
            self.out_dir.mkdir(parents=True, exist_ok=True)

    def _save(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        scorer = getattr(pl_module, "scorer", None)
        if trainer.sanity_checking or scorer is None or not trainer.is_global_zero:
            return
        dm: Any = getattr(trainer, "datamodule", None)
        images = dm.image_files(stage) if dm is not None else {}
        self.written = write_results(scorer, self.out_dir, images)
        header, rows = per_class_rows(scorer)
        print(f"\nper-class AP ({stage})\n{format_per_class(header, rows)}")
        print(f"lucid: wrote {', '.join(str(p) for p in self.written)}")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save(trainer, pl_module, "val")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save(trainer, pl_module, "test")
