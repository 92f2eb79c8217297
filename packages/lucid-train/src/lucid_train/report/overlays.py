"""Prediction overlays: boxes, masks, rotated boxes and keypoints drawn on an image (Pillow).

`detections_to_numpy` turns a fixed-shape `Detections` of a batch into per-image numpy records
(scored rows only, masks assembled on the canvas); `draw_overlay` draws one record.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch import Tensor

from lucid_models import Detections, ModelOutput, decode_masks

__all__ = ["detections_to_numpy", "draw_overlay", "palette"]

SCORE_FLOOR = 0.25  # overlays show what a user would keep, not the evaluation's long tail


def palette(label: int) -> tuple[int, int, int]:
    """A stable, well-separated colour per class (golden-angle hues)."""
    h = (label * 0.618033988749895) % 1.0
    i, f = int(h * 6), (h * 6) % 1
    q, t = int(255 * (1 - f)), int(255 * f)
    return [(255, t, 0), (q, 255, 0), (0, 255, t), (0, q, 255), (t, 0, 255), (255, 0, q)][i % 6]


def detections_to_numpy(
    images: Tensor,
    output: ModelOutput,
    det: Detections,
    *,
    limit: int | None = None,
    score_floor: float = SCORE_FLOOR,
) -> list[dict[str, Any]]:
    """Per-image records of the rows scoring above ``score_floor``.

    Args:
        images: ``(B, S, S, 3)`` uint8 canvases.
        output: the forward that ``det`` decodes (prototypes for masks).
        det: ``(B, k, ...)`` detections in canvas pixels.
        limit: at most this many images.

    Returns:
        A list of dicts with ``image`` (S, S, 3) uint8, ``boxes`` (D, 4), ``scores`` (D,),
        ``labels`` (D,) and, as present, ``rotated`` (D, 5), ``keypoints`` (D, K, 3),
        ``masks`` (D, S, S) bool.
    """
    n = len(images) if limit is None else min(limit, len(images))
    keep = (det.labels[:n] >= 0) & (det.scores[:n] > score_floor)  # (n, k)
    masks = None
    if det.mask_coefficients is not None and output.prototypes is not None:
        size = (int(images.shape[1]), int(images.shape[2]))
        sub = Detections(
            det.boxes[:n],
            det.scores[:n],
            det.labels[:n],
            det.anchor_indices[:n],
            mask_coefficients=det.mask_coefficients[:n],
        )
        with torch.no_grad():
            masks = decode_masks(sub, output.prototypes[:n], size).cpu().numpy()
    out: list[dict[str, Any]] = []
    k_np = keep.cpu().numpy()
    for i in range(n):
        sel = k_np[i]
        rec: dict[str, Any] = {
            "image": images[i].cpu().numpy(),
            "boxes": det.boxes[i].detach().cpu().numpy()[sel],
            "scores": det.scores[i].detach().cpu().numpy()[sel],
            "labels": det.labels[i].cpu().numpy()[sel],
        }
        if det.rotated is not None:
            rec["rotated"] = det.rotated[i].detach().cpu().numpy()[sel]
        if det.keypoints is not None:
            rec["keypoints"] = det.keypoints[i].detach().cpu().numpy()[sel]
        if masks is not None:
            rec["masks"] = masks[i][sel]
        out.append(rec)
    return out


def rotated_corners(rboxes: np.ndarray) -> np.ndarray:
    """``(N, 5)`` ``(cx, cy, w, h, angle)`` -> ``(N, 4, 2)`` corners."""
    cx, cy, w, h, a = (rboxes[:, i] for i in range(5))
    cos, sin = np.cos(a), np.sin(a)
    dx = np.array([-1, 1, 1, -1])[None] * (w / 2)[:, None]
    dy = np.array([-1, -1, 1, 1])[None] * (h / 2)[:, None]
    xs = cx[:, None] + dx * cos[:, None] - dy * sin[:, None]
    ys = cy[:, None] + dx * sin[:, None] + dy * cos[:, None]
    return np.stack([xs, ys], -1)


def draw_overlay(
    record: dict[str, Any],
    class_names: Sequence[str],
    skeleton: Sequence[Sequence[int]] = (),
) -> Image.Image:
    """Draw one record of `detections_to_numpy` (masks tinted, then boxes or rotated boxes, then
    keypoints with their skeleton, then ``name score`` labels; ``name`` alone for a record
    without ``scores``, such as ground truth)."""
    base = np.asarray(record["image"], np.float32).copy()
    labels = [int(v) for v in record["labels"]]
    if "masks" in record:
        for m, lab in zip(record["masks"], labels, strict=True):
            base[m] = base[m] * 0.5 + np.asarray(palette(lab), np.float32) * 0.5
    img = Image.fromarray(base.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    if "rotated" in record:
        for corners, lab in zip(rotated_corners(record["rotated"]), labels, strict=True):
            draw.polygon([tuple(p) for p in corners.tolist()], outline=palette(lab), width=2)
    else:
        for box, lab in zip(record["boxes"], labels, strict=True):
            draw.rectangle(box.tolist(), outline=palette(lab), width=2)
    if "keypoints" in record:
        for kpts in record["keypoints"]:
            seen = kpts[:, 2] > 0.5
            for a, b in skeleton:
                if seen[a] and seen[b]:
                    draw.line([tuple(kpts[a, :2]), tuple(kpts[b, :2])], fill=(255, 255, 0), width=1)
            for (x, y), ok in zip(kpts[:, :2].tolist(), seen.tolist(), strict=True):
                if ok:
                    draw.ellipse([x - 2, y - 2, x + 2, y + 2], fill=(255, 0, 0))
    scores = record.get("scores")  # ground truth has none: the name alone
    for i, (box, lab) in enumerate(zip(record["boxes"], labels, strict=True)):
        name = class_names[lab] if 0 <= lab < len(class_names) else str(lab)
        text = name if scores is None else f"{name} {float(scores[i]):.2f}"
        x1, y1 = float(box[0]), float(box[1])
        draw.text((x1 + 2, max(y1 - 11, 0)), text, fill=palette(lab))
    return img


_ = math
