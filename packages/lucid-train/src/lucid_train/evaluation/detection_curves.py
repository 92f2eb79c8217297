"""Per-class precision, recall and F1 over confidence, PR curves, and the confusion matrix.

These are the diagnostics a run's report draws (`lucid_train.report.validation_curves`), not the
metrics of record (pycocotools and the DOTA protocol give those). `DetectionDiagnostics` takes one
image at a time — detections and ground truth in the same pixels, axis-aligned ``(x1, y1, x2, y2)``
boxes or rotated ``(cx, cy, w, h, theta)`` ones — computes their IoU once and feeds two tallies:

- **Curves at IoU 0.5.** Per class, detections are matched greedily by descending score, each to
  the not yet matched ground truth of its class with the highest IoU >= 0.5 (COCO's rule); one
  that only reaches a difficult ground truth is ignored, and difficult ground truth does not
  count towards recall. `CurveSet` then holds precision, recall and F1 at 1000 confidence
  thresholds (the detections with score >= t; precision 1 above the best score, 0 everywhere
  for a class never detected), and the PR curve as COCO interpolates it: the
  precision envelope at 101 recall points, whose mean is the class's AP50.
- **Confusion matrix** (the authors' convention, assumptions.md T76): detections with score above
  0.25 are matched to ground truth of any class, one to one, highest IoU first, pairs with IoU
  above 0.45. ``matrix[predicted, true]`` has one extra row and column, background: a ground
  truth nothing matched counts in the background row, a detection that matched nothing in the
  background column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from lucid_train.evaluation.rotated import rotated_iou_matrix

__all__ = [
    "CONFUSION_CONF",
    "CONFUSION_IOU",
    "CurveSet",
    "DetectionDiagnostics",
    "box_iou_matrix",
    "confusion_update",
    "match_by_score",
]

CURVE_IOU = 0.5
CONFUSION_CONF = 0.25  # the authors' confusion-matrix confidence (their predict default)
CONFUSION_IOU = 0.45  # and IoU threshold
CONFIDENCES = np.linspace(0.0, 1.0, 1000)
RECALLS = np.linspace(0.0, 1.0, 101)  # COCO's recall points

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B1 = npt.NDArray[np.bool_]


def box_iou_matrix(a: npt.ArrayLike, b: npt.ArrayLike) -> F64:
    """IoU ``(N, M)`` of xyxy boxes ``(N, 4)`` and ``(M, 4)`` (0 where the union is empty)."""
    p, q = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    lo = np.maximum(p[:, None, :2], q[None, :, :2])
    hi = np.minimum(p[:, None, 2:], q[None, :, 2:])
    inter = np.clip(hi - lo, 0, None).prod(-1)
    area_p = np.clip(p[:, 2:] - p[:, :2], 0, None).prod(-1)
    area_q = np.clip(q[:, 2:] - q[:, :2], 0, None).prod(-1)
    union = area_p[:, None] + area_q[None, :] - inter
    out: F64 = np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)
    return out


def match_by_score(
    iou: F64,
    scores: F64,
    det_labels: I64,
    gt_labels: I64,
    gt_difficult: B1,
    threshold: float = CURVE_IOU,
) -> tuple[B1, B1]:
    """Per detection ``(true_positive, ignored)`` for one image; ``iou`` is ``(D, G)``.

    Detections are visited by descending score (stable); each takes the free ground truth of its
    own class with the highest IoU >= ``threshold``. Taking a difficult one marks it ignored."""
    d = scores.shape[0]
    tp, ignored = np.zeros(d, np.bool_), np.zeros(d, np.bool_)
    taken = np.zeros(gt_labels.shape[0], np.bool_)
    candidates = (gt_labels[None, :] == det_labels[:, None]) & (iou >= threshold)  # (D, G)
    reach = candidates.any(1)  # the others are false positives whatever the order
    for k in np.argsort(-scores, kind="stable").tolist():
        if not reach[k]:
            continue
        ok = candidates[k] & ~taken
        if not ok.any():
            continue
        j = int(np.argmax(np.where(ok, iou[k], -1.0)))
        taken[j] = True
        if gt_difficult[j]:
            ignored[k] = True
        else:
            tp[k] = True
    return tp, ignored


def confusion_update(
    matrix: npt.NDArray[np.int64],
    iou: F64,
    det_labels: I64,
    gt_labels: I64,
    threshold: float = CONFUSION_IOU,
) -> None:
    """Add one image to ``matrix`` ``(C + 1, C + 1)`` [predicted, true] (index C: background);
    ``iou`` is ``(D, G)`` for the detections already kept by confidence."""
    nc = matrix.shape[0] - 1
    det_free = np.ones(det_labels.shape[0], np.bool_)
    gt_free = np.ones(gt_labels.shape[0], np.bool_)
    rows, cols = np.nonzero(iou > threshold)
    for i in np.argsort(-iou[rows, cols], kind="stable").tolist():
        k, j = int(rows[i]), int(cols[i])
        if det_free[k] and gt_free[j]:
            det_free[k] = gt_free[j] = False
            matrix[det_labels[k], gt_labels[j]] += 1
    np.add.at(matrix, (np.full(int(gt_free.sum()), nc), gt_labels[gt_free]), 1)
    np.add.at(matrix, (det_labels[det_free], np.full(int(det_free.sum()), nc)), 1)


@dataclass(frozen=True)
class CurveSet:
    """Per-class curves; rows of classes without (non-difficult) ground truth are NaN.

    Attributes:
        confidence: ``(T,)`` thresholds 0..1.
        precision, recall, f1: ``(C, T)`` over ``confidence``.
        pr_recall: ``(R,)`` recall points 0..1.
        pr_precision: ``(C, R)`` interpolated precision (the envelope) at ``pr_recall``.
        ap50: ``(C,)`` mean of ``pr_precision`` per class.
        instances: ``(C,)`` non-difficult ground truth per class.
    """

    confidence: F64
    precision: F64
    recall: F64
    f1: F64
    pr_recall: F64
    pr_precision: F64
    ap50: F64
    instances: I64

    @property
    def valid(self) -> B1:
        """Classes with ground truth (the ones averaged into "all classes")."""
        out: B1 = self.instances > 0
        return out

    def mean(self, curve: F64) -> F64:
        """The mean over classes with ground truth of a ``(C, N)`` curve (NaN if none)."""
        if not self.valid.any():
            return np.full(curve.shape[1], np.nan)
        out: F64 = curve[self.valid].mean(0)
        return out

    def best_f1(self) -> tuple[float, float]:
        """``(confidence, F1)`` where the mean F1 curve peaks (NaN, NaN without ground truth)."""
        mean = self.mean(self.f1)
        if not np.isfinite(mean).any():
            return float("nan"), float("nan")
        i = int(np.nanargmax(mean))
        return float(self.confidence[i]), float(mean[i])


@dataclass
class DetectionDiagnostics:
    """Accumulates matched detections per image; `curves` and `confusion` summarise them.

    Attributes:
        num_classes: contiguous labels ``0 .. C-1``.
        rotated: boxes are ``(cx, cy, w, h, theta)`` (polygon IoU), else xyxy.
        confusion_conf, confusion_iou: the confusion matrix's thresholds.
    """

    num_classes: int
    rotated: bool = False
    confusion_conf: float = CONFUSION_CONF
    confusion_iou: float = CONFUSION_IOU
    matrix: npt.NDArray[np.int64] = field(init=False)
    images: int = 0
    _scores: list[F64] = field(default_factory=list)
    _labels: list[I64] = field(default_factory=list)
    _tp: list[B1] = field(default_factory=list)
    _instances: I64 = field(init=False)

    def __post_init__(self) -> None:
        self.matrix = np.zeros((self.num_classes + 1, self.num_classes + 1), np.int64)
        self._instances = np.zeros(self.num_classes, np.int64)

    def add(
        self,
        det_boxes: npt.ArrayLike,
        det_scores: npt.ArrayLike,
        det_labels: npt.ArrayLike,
        gt_boxes: npt.ArrayLike,
        gt_labels: npt.ArrayLike,
        gt_difficult: npt.ArrayLike | None = None,
    ) -> None:
        """One image: detections ``(D, 4|5)``, ``(D,)``, ``(D,)``; ground truth ``(G, 4|5)``,
        ``(G,)`` and optionally ``(G,)`` bool difficult."""
        width = 5 if self.rotated else 4
        db = np.asarray(det_boxes, np.float64).reshape(-1, width)
        ds = np.asarray(det_scores, np.float64).reshape(-1)
        dl = np.asarray(det_labels, np.int64).reshape(-1)
        gb = np.asarray(gt_boxes, np.float64).reshape(-1, width)
        gl = np.asarray(gt_labels, np.int64).reshape(-1)
        gd = (
            np.zeros(gl.shape[0], np.bool_)
            if gt_difficult is None
            else np.asarray(gt_difficult, np.bool_).reshape(-1)
        )
        iou = rotated_iou_matrix(db, gb) if self.rotated else box_iou_matrix(db, gb)  # (D, G)
        tp, ignored = match_by_score(iou, ds, dl, gl, gd)
        keep = ~ignored
        self._scores.append(ds[keep])
        self._labels.append(dl[keep])
        self._tp.append(tp[keep])
        self._instances += np.bincount(gl[~gd], minlength=self.num_classes)[: self.num_classes]
        sure = ds > self.confusion_conf
        confusion_update(self.matrix, iou[sure], dl[sure], gl, self.confusion_iou)
        self.images += 1

    def curves(self) -> CurveSet:
        """The per-class curves of everything added so far."""
        nc, t = self.num_classes, CONFIDENCES.size
        scores = np.concatenate(self._scores) if self._scores else np.zeros(0)
        labels = np.concatenate(self._labels) if self._labels else np.zeros(0, np.int64)
        tp = np.concatenate(self._tp) if self._tp else np.zeros(0, np.bool_)
        precision, recall = np.full((nc, t), np.nan), np.full((nc, t), np.nan)
        pr = np.full((nc, RECALLS.size), np.nan)
        for c in range(nc):
            npos = int(self._instances[c])
            if npos == 0:
                continue
            sel = labels == c
            order = np.argsort(-scores[sel], kind="stable")
            s, hits = scores[sel][order], tp[sel][order]
            if s.size == 0:  # never detected: nothing to be precise about
                recall[c], precision[c], pr[c] = 0.0, 0.0, 0.0
                continue
            tpc = np.cumsum(hits)
            rec = tpc / npos
            prec = tpc / np.arange(1, s.size + 1)
            # kept at threshold t: the detections with score >= t (s is descending)
            kept = np.searchsorted(-s, -CONFIDENCES, side="right")
            last = np.maximum(kept - 1, 0)
            recall[c] = np.where(kept > 0, rec[last], 0.0)
            precision[c] = np.where(kept > 0, prec[last], 1.0)
            envelope = np.maximum.accumulate(prec[::-1])[::-1]
            at = np.searchsorted(rec, RECALLS, side="left")  # first point reaching each recall
            pr[c] = np.where(at < s.size, envelope[np.minimum(at, s.size - 1)], 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            f1 = 2 * precision * recall / (precision + recall)
        f1 = np.where(np.isnan(precision), np.nan, np.nan_to_num(f1, nan=0.0))
        return CurveSet(
            confidence=CONFIDENCES.copy(),
            precision=precision,
            recall=recall,
            f1=f1,
            pr_recall=RECALLS.copy(),
            pr_precision=pr,
            ap50=pr.mean(1),
            instances=self._instances.copy(),
        )
