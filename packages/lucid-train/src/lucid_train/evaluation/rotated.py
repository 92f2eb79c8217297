"""Rotated-box mAP by the DOTA protocol, with exact polygon IoU.

Per class, detections of all images are sorted by score (stable, so ties keep insertion order);
each takes the ground truth of its image with the highest IoU (convex polygon clipping). Above
the threshold it is a true positive if that ground truth is not yet taken and not difficult, is
ignored if the ground truth is difficult, and is a false positive otherwise (also below the
threshold). Difficult ground truth does not count towards recall. AP is the DOTA devkit's
VOC07 11-point interpolation by default, or the area under the monotone precision envelope
(``ap_mode='area'``); a class without non-difficult ground truth is left out of the mean.
``mAP50_95`` averages the thresholds 0.50:0.05:0.95.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from lucid_train.data.polygons import convex_iou
from lucid_train.data.rotated import rbox_corners

APMode = Literal["voc07", "area"]
IOU_THRESHOLDS = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))


def rotated_iou_matrix(a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """IoU ``(N, M)`` of rotated boxes ``(N, 5)`` and ``(M, 5)`` by polygon intersection.

    Pairs whose envelopes do not touch are 0 without clipping. Each pair is computed relative to
    the midpoint of their centres so that large coordinates lose no precision.
    """
    ca, cb = rbox_corners(a), rbox_corners(b)  # (N, 4, 2), (M, 4, 2)
    out = np.zeros((ca.shape[0], cb.shape[0]), np.float64)
    if not out.size:
        return out
    lo_a, hi_a, lo_b, hi_b = ca.min(1), ca.max(1), cb.min(1), cb.max(1)
    touch = (
        (lo_a[:, None, 0] <= hi_b[None, :, 0])
        & (lo_b[None, :, 0] <= hi_a[:, None, 0])
        & (lo_a[:, None, 1] <= hi_b[None, :, 1])
        & (lo_b[None, :, 1] <= hi_a[:, None, 1])
    )
    for i, j in zip(*np.nonzero(touch), strict=True):
        mid = (ca[i].mean(0) + cb[j].mean(0)) / 2
        out[i, j] = convex_iou(ca[i] - mid, cb[j] - mid)
    return out


def average_precision(
    recall: npt.NDArray[np.float64], precision: npt.NDArray[np.float64], mode: APMode = "voc07"
) -> float:
    """AP from a precision/recall curve ordered by descending score."""
    if mode == "voc07":
        ap = 0.0
        for t in np.linspace(0, 1, 11):
            p = precision[recall >= t]
            ap += (float(p.max()) if p.size else 0.0) / 11
        return ap
    r = np.concatenate([[0.0], recall, [1.0]])
    p = np.concatenate([[0.0], precision, [0.0]])
    p = np.maximum.accumulate(p[::-1])[::-1]
    steps = np.flatnonzero(r[1:] != r[:-1])
    return float(np.sum((r[steps + 1] - r[steps]) * p[steps + 1]))


@dataclass
class _Image:
    gt: npt.NDArray[np.float64]
    gt_labels: npt.NDArray[np.int64]
    gt_difficult: npt.NDArray[np.bool_]
    dt: npt.NDArray[np.float64]
    dt_scores: npt.NDArray[np.float64]
    dt_labels: npt.NDArray[np.int64]


@dataclass
class RotatedEvaluator:
    """Accumulates rotated detections and ground truth per image; `compute` gives DOTA mAP.

    Attributes:
        num_classes: contiguous labels ``0 .. C-1``.
        ap_mode: ``voc07`` (DOTA devkit) or ``area``.
    """

    num_classes: int
    ap_mode: APMode = "voc07"
    images: list[_Image] = field(default_factory=list)

    def add(
        self,
        det_rboxes: npt.ArrayLike,
        det_scores: npt.ArrayLike,
        det_labels: npt.ArrayLike,
        gt_rboxes: npt.ArrayLike,
        gt_labels: npt.ArrayLike,
        gt_difficult: npt.ArrayLike | None = None,
    ) -> None:
        """One image: detections ``(D, 5)``, ``(D,)``, ``(D,)`` and ground truth ``(G, 5)``,
        ``(G,)``, ``(G,)`` bool, rotated boxes ``(cx, cy, w, h, theta)`` in the same pixels."""
        gt = np.asarray(gt_rboxes, np.float64).reshape(-1, 5)
        diff = (
            np.zeros(gt.shape[0], np.bool_)
            if gt_difficult is None
            else np.asarray(gt_difficult, np.bool_).reshape(-1)
        )
        self.images.append(
            _Image(
                gt,
                np.asarray(gt_labels, np.int64).reshape(-1),
                diff,
                np.asarray(det_rboxes, np.float64).reshape(-1, 5),
                np.asarray(det_scores, np.float64).reshape(-1),
                np.asarray(det_labels, np.int64).reshape(-1),
            )
        )

    def compute(self, iou_thresholds: tuple[float, ...] = IOU_THRESHOLDS) -> dict[str, float]:
        """``mAP50``, ``mAP50_95`` and ``AP50/<label>``, ``AP50-95/<label>`` per class with
        ground truth."""
        thr = np.asarray(iou_thresholds, np.float64)
        ap = np.full((self.num_classes, thr.size), np.nan)
        for c in range(self.num_classes):
            npos = sum(int(((im.gt_labels == c) & ~im.gt_difficult).sum()) for im in self.images)
            if npos == 0:
                continue
            scores, tp = [], []
            for im in self.images:
                dsel, gsel = im.dt_labels == c, im.gt_labels == c
                if not dsel.any():
                    continue
                order = np.argsort(-im.dt_scores[dsel], kind="stable")
                d, s = im.dt[dsel][order], im.dt_scores[dsel][order]
                g, gd = im.gt[gsel], im.gt_difficult[gsel]
                iou = rotated_iou_matrix(d, g)  # (D, G)
                marks = np.zeros((d.shape[0], thr.size), np.int8)  # 1 TP, 0 FP, -1 ignored
                taken = np.zeros((g.shape[0], thr.size), np.bool_)
                for k in range(d.shape[0]):
                    if g.shape[0] == 0:
                        continue
                    j = int(np.argmax(iou[k]))
                    above = iou[k, j] >= thr
                    if gd[j]:
                        marks[k] = np.where(above, -1, 0)
                    else:
                        new = above & ~taken[j]
                        marks[k] = np.where(new, 1, 0)
                        taken[j] |= new
                scores.append(s)
                tp.append(marks)
            if not scores:
                ap[c] = 0.0
                continue
            s_all, m_all = np.concatenate(scores), np.concatenate(tp)
            order = np.argsort(-s_all, kind="stable")
            m_all = m_all[order]
            for t in range(thr.size):
                col = m_all[:, t][m_all[:, t] >= 0]
                tps, fps = np.cumsum(col == 1), np.cumsum(col == 0)
                recall = tps / npos
                precision = tps / np.maximum(tps + fps, np.finfo(np.float64).eps)
                ap[c, t] = average_precision(recall, precision, self.ap_mode)
        valid = ~np.isnan(ap[:, 0])
        out = {
            "mAP50": float(ap[valid, 0].mean()) if valid.any() and thr[0] == 0.5 else float("nan"),
            "mAP50_95": float(ap[valid].mean()) if valid.any() else float("nan"),
        }
        for c in np.flatnonzero(valid).tolist():
            out[f"AP50/{c}"] = float(ap[c, 0])
            out[f"AP50-95/{c}"] = float(ap[c].mean())
        return out
