"""The validation mosaic: each validation canvas drawn twice, ground truth beside predictions.

`truth_records` takes the ground truth of a validation `Batch` (canvas pixels) into the record
layout of `lucid_train.report.overlays`; `draw_val_mosaic` scales every pair to `TILE` pixels and
stacks them one pair per row under a header naming the two columns (assumptions.md T78).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from lucid_train.data.transport import Batch
from lucid_train.report.charts import font
from lucid_train.report.overlays import SCORE_FLOOR, draw_overlay

__all__ = ["HEADER", "TILE", "draw_val_mosaic", "mosaic_size", "scale_record", "truth_records"]

TILE = 384
HEADER = 32
MASK_STRIDE = 4  # instance maps are at stride 4 (assumptions.md D14)


def truth_records(batch: Batch, limit: int) -> list[dict[str, Any]]:
    """The ground truth of the first ``limit`` images of ``batch``: ``image``, ``boxes``,
    ``labels`` and, as the task has them, ``rotated``, ``keypoints`` ``(x, y, visibility)`` and
    ``masks`` (canvas-sized, from the stride-4 instance map). One host copy per field."""
    n = min(limit, len(batch))
    if n == 0:
        return []
    owner = batch.batch_idx.cpu().numpy()
    boxes, labels = batch.boxes.cpu().numpy(), batch.labels.cpu().numpy()
    rboxes = batch.rboxes.cpu().numpy() if batch.rboxes.shape[0] else None
    kpts = batch.keypoints.cpu().numpy() if batch.keypoints.shape[1] else None
    maps = batch.instance_map[:n].cpu().numpy() if batch.instance_map.shape[1] else None
    images = batch.images[:n].cpu().numpy()
    out = []
    for i in range(n):
        sel = owner == i
        rec: dict[str, Any] = {"image": images[i], "boxes": boxes[sel], "labels": labels[sel]}
        if rboxes is not None:
            rec["rotated"] = rboxes[sel]
        if kpts is not None:
            rec["keypoints"] = kpts[sel]
        if maps is not None:
            full = np.kron(maps[i], np.ones((MASK_STRIDE, MASK_STRIDE), maps.dtype))
            full = full[: images.shape[1], : images.shape[2]]
            ids = np.arange(1, int(sel.sum()) + 1, dtype=full.dtype)
            rec["masks"] = full[None] == ids[:, None, None]
        out.append(rec)
    return out


def scale_record(record: dict[str, Any], side: int) -> dict[str, Any]:
    """``record`` with its square canvas resized to ``side`` and its geometry scaled to match
    (rotated boxes keep their angle; masks resized nearest)."""
    image = np.asarray(record["image"])
    f = side / max(image.shape[0], 1)
    out = dict(record)
    resized = Image.fromarray(image).resize((side, side), Image.Resampling.BILINEAR)
    out["image"] = np.asarray(resized)
    out["boxes"] = np.asarray(record["boxes"], np.float64) * f
    if "rotated" in record:
        r = np.asarray(record["rotated"], np.float64).copy()
        r[:, :4] *= f
        out["rotated"] = r
    if "keypoints" in record:
        k = np.asarray(record["keypoints"], np.float64).copy()
        k[..., :2] *= f
        out["keypoints"] = k
    if "masks" in record:
        out["masks"] = np.stack(
            [
                np.asarray(Image.fromarray(m).resize((side, side), Image.Resampling.NEAREST))
                for m in np.asarray(record["masks"], np.uint8)
            ]
        ).astype(bool) if len(record["masks"]) else np.zeros((0, side, side), bool)  # fmt: skip
    return out


def mosaic_size(pairs: int) -> tuple[int, int]:
    """Pixel size of a mosaic of ``pairs`` images."""
    return 2 * TILE, HEADER + max(pairs, 1) * TILE


def draw_val_mosaic(
    truths: Sequence[dict[str, Any]],
    predictions: Sequence[dict[str, Any]],
    class_names: Sequence[str],
    skeleton: Sequence[Sequence[int]] = (),
) -> Image.Image:
    """Ground truth (left) beside the predictions (right), one validation image per row."""
    pairs = min(len(truths), len(predictions))
    sheet = Image.new("RGB", mosaic_size(pairs), "white")
    draw = ImageDraw.Draw(sheet)
    titles = ("ground truth", f"predictions (end-to-end, score > {SCORE_FLOOR:g})")
    for col, text in enumerate(titles):
        draw.text((col * TILE + TILE // 2, HEADER // 2), text, fill="black", font=font(16),
                  anchor="mm")  # fmt: skip
    for row in range(pairs):
        for col, rec in enumerate((truths[row], predictions[row])):
            tile = draw_overlay(scale_record(rec, TILE), class_names, skeleton)
            sheet.paste(tile, (col * TILE, HEADER + row * TILE))
    for x in (TILE,):
        draw.line([(x, HEADER), (x, sheet.height)], fill="white", width=3)
    return sheet
