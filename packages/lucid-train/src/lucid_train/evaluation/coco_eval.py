"""COCO metrics for boxes, masks and keypoints, pycocotools' numbers by a compiled scorer.

`CocoEvaluator` collects detections in *source image* pixels (undo the letterbox first, e.g.
with `lucid_train.data.augment.LetterboxParams.boxes_to_source`), maps contiguous labels back to
the dataset's category ids, and scores them as calling COCO's API by hand would: ``COCO``
ground truth from the dataset's JSON, ``loadRes`` on the detection list, ``COCOeval``
``evaluate / accumulate / summarize``. The summary is returned by name.

Two scorers run that API (``scorer=``, `Scorer`):

- ``"faster"``, the default: faster-coco-eval's ``COCOeval_faster`` (its per-image matching
  and accumulation in C++). It gives pycocotools' summary statistics and precision arrays to
  within 2e-16 (one rounding of a precision; recall exactly), tested on random cases with crowds,
  ties, images and categories without ground truth, masks and keypoints at test time
  (``tests/lucid-train/test_eval_compiled_scorer.py``), in about a tenth of the time: a
  validation of 64 images x 300 detections on two decode paths spent most of its wall in
  pycocotools' pure-Python ``evaluateImg``, between every two epochs of a fit.
- ``"pycocotools"``: pycocotools itself, the reference those numbers are held to.

Either way the masks are pycocotools' RLEs (`rle_encode`). Keypoint similarity uses COCO's 17
per-keypoint sigmas when the schema has 17 keypoints and a uniform sigma of 0.072 otherwise
(assumptions.md D12); pass ``kpt_sigmas`` to choose others. `MultiDecodeEvaluator` keeps one
evaluator per decode path (end-to-end and NMS) so both are scored from one forward.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import io
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import torch
from faster_coco_eval.core import coco as faster_coco
from faster_coco_eval.core.faster_eval_api import COCOeval_faster
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

IouType = Literal["bbox", "segm", "keypoints"]
Scorer = Literal["faster", "pycocotools"]
SCORERS: tuple[Scorer, ...] = ("faster", "pycocotools")
DEFAULT_SCORER: Scorer = "faster"

COCO_KPT_SIGMAS = (
    np.array(
        [
            0.26,
            0.25,
            0.25,
            0.35,
            0.35,
            0.79,
            0.79,
            0.72,
            0.72,
            0.62,
            0.62,
            1.07,
            1.07,
            0.87,
            0.87,
            0.89,
            0.89,
        ]
    )
    / 10.0
)
UNIFORM_KPT_SIGMA = 0.072

BOX_STAT_NAMES = (
    "mAP",
    "mAP50",
    "mAP75",
    "mAP_small",
    "mAP_medium",
    "mAP_large",
    "mAR1",
    "mAR10",
    "mAR100",
    "mAR_small",
    "mAR_medium",
    "mAR_large",
)
KPT_STAT_NAMES = (
    "mAP",
    "mAP50",
    "mAP75",
    "mAP_medium",
    "mAP_large",
    "mAR",
    "mAR50",
    "mAR75",
    "mAR_medium",
    "mAR_large",
)


def keypoint_sigmas(num_keypoints: int) -> npt.NDArray[np.float64]:
    """COCO's sigmas for 17 keypoints, else the stated uniform sigma (``(K,)`` float64)."""
    if num_keypoints == 17:
        return COCO_KPT_SIGMAS.copy()
    return np.full(num_keypoints, UNIFORM_KPT_SIGMA)


def _check_scorer(scorer: str) -> None:
    if scorer not in SCORERS:
        raise ValueError(f"scorer must be one of {SCORERS}, got {scorer!r}")


def coco_from_dict(doc: dict[str, Any], scorer: Scorer = DEFAULT_SCORER) -> Any:
    """The ground truth ``COCO`` of ``scorer``'s library built from an in-memory document
    (a copy of it, quietly): faster-coco-eval's for ``"faster"``, pycocotools' otherwise."""
    _check_scorer(scorer)
    gt = faster_coco.COCO() if scorer == "faster" else COCO()
    gt.dataset = copy.deepcopy(doc)
    gt.dataset.setdefault("info", {})
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
    return gt


def _quiet(*_: Any, **__: Any) -> None:
    """faster-coco-eval's print function: its progress lines say nothing a fit needs."""


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a block that makes many acyclic objects.

    Scoring makes a dict (and lists) a result row. Every few hundred new objects the collector
    runs, and as they pile up its full passes walk every object the process holds, a fit's
    model and trainer included. Rows kept as arrays and scored in such a block: 1.56 -> 0.85 s
    for 256 images of 300 rows, 20.2 -> 13.2 s for 5,000, a yolo26n module in the process, on
    the CPU machine (`benchmarks/scoring_scale.py`, docs/benchmarks/epoch-overhead/
    cpu-2026-12-06-scoring-gc). Nothing made here is cyclic: reference counting frees it all.
    The collector is back on (if it was) when the block ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _cocoeval(gt: Any, dt: Any, iou_type: IouType, scorer: Scorer) -> Any:
    if scorer == "pycocotools":
        return COCOeval(gt, dt, iou_type)
    ev = COCOeval_faster(gt, dt, iou_type, print_function=_quiet)
    # pycocotools scores every category of the ground truth; faster-coco-eval's keypoints only
    # those with annotations. The same list keeps the precision arrays (and per_class) alike.
    ev.params.catIds = sorted(gt.getCatIds())
    return ev


def run_cocoeval(
    gt: Any,
    detections: list[dict[str, Any]],
    iou_type: IouType,
    kpt_sigmas: npt.NDArray[np.float64] | None = None,
    per_class: dict[int, tuple[float, float]] | None = None,
    scorer: Scorer = DEFAULT_SCORER,
) -> dict[str, float]:
    """Score ``detections`` (COCO result dicts) against ``gt``; the summary by name.

    With no detections every statistic is 0.0 (pycocotools refuses an empty result list).

    Args:
        gt: a ground truth ``COCO`` (`coco_from_dict`); one of the other library than
            ``scorer``'s is rebuilt from its document.
        per_class: if given, filled with ``{category_id: (AP50-95, AP50)}`` for every category
            of ``gt`` (`per_class_ap`; NaN for a category without ground truth).
        scorer: ``"faster"`` (the default, module docstring) or ``"pycocotools"``.
    """
    _check_scorer(scorer)
    # loadRes and COCOeval add keys to each result dict (id, area, a box's polygon) and replace
    # a mask's segmentation; they never change a value in place, so copying the dicts keeps the
    # caller's intact (a deep copy took 150 ms per 30 000 detections, this 8 ms).
    return _score(gt, [dict(d) for d in detections], iou_type, kpt_sigmas, per_class, scorer)


def _score(
    gt: Any,
    detections: list[dict[str, Any]],
    iou_type: IouType,
    kpt_sigmas: npt.NDArray[np.float64] | None,
    per_class: dict[int, tuple[float, float]] | None,
    scorer: Scorer,
) -> dict[str, float]:
    """`run_cocoeval` of result dicts it may change (its own copies, or `CocoEvaluator`'s)."""
    if isinstance(gt, faster_coco.COCO) != (scorer == "faster"):
        gt = coco_from_dict(gt.dataset, scorer)
    names = KPT_STAT_NAMES if iou_type == "keypoints" else BOX_STAT_NAMES
    if not detections:
        if per_class is not None:
            per_class.update({int(c): (0.0, 0.0) for c in gt.getCatIds()})
        return dict.fromkeys(names, 0.0)
    with contextlib.redirect_stdout(io.StringIO()), collector_paused():
        dt = gt.loadRes(detections)
        ev = _cocoeval(gt, dt, iou_type, scorer)
        if iou_type == "keypoints" and kpt_sigmas is not None:
            ev.params.kpt_oks_sigmas = np.asarray(kpt_sigmas, np.float64)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    if per_class is not None:
        per_class.update(per_class_ap(ev))
    return {n: float(v) for n, v in zip(names, ev.stats, strict=True)}


def per_class_ap(ev: Any) -> dict[int, tuple[float, float]]:
    """``{category_id: (AP50-95, AP50)}`` of an accumulated ``COCOeval`` (either scorer's),
    read from its precision array as its own summary reads the mean (all areas, the largest
    ``maxDets``): the mean over IoU thresholds and recall points where precision is defined;
    NaN where a category has none (no ground truth)."""
    precision = ev.eval["precision"]  # (T, R, K, A, M)
    out: dict[int, tuple[float, float]] = {}
    for k, cat in enumerate(ev.params.catIds):
        p = precision[:, :, k, 0, -1]
        valid, valid50 = p[p > -1], p[0][p[0] > -1]
        ap = float(valid.mean()) if valid.size else float("nan")
        ap50 = float(valid50.mean()) if valid50.size else float("nan")
        out[int(cat)] = (ap, ap50)
    return out


def rle_encode(masks: torch.Tensor) -> list[dict[str, Any]]:
    """pycocotools' compressed RLEs of ``(D, H, W)`` bool masks, the same as its ``encode``.

    The runs are found where the masks are (on the GPU in validation): only their boundaries
    come to the host, not ``D * H * W`` bytes to copy into Fortran order and encode there. A
    segment validation of 64 images of about 600 x 700 carries 100 masks an image on each
    decode path."""
    d, h, w = masks.shape
    if d == 0:
        return []
    flat = masks.transpose(1, 2).reshape(d, h * w)  # column-major, COCO's order
    det, pos = (flat[:, 1:] != flat[:, :-1]).nonzero(as_tuple=True)
    starts_on = flat[:, 0].cpu().numpy()
    det_np, pos_np = det.cpu().numpy(), pos.cpu().numpy() + 1  # the first pixel of each run
    per = np.split(pos_np, np.cumsum(np.bincount(det_np, minlength=d))[:-1])
    objs = []
    for k in range(d):
        counts = np.diff(np.concatenate(([0], per[k], [h * w])))
        if starts_on[k]:  # RLE counts begin with a run of zeros, here of none
            counts = np.concatenate(([0], counts))
        objs.append({"size": [h, w], "counts": counts.tolist()})
    rles: list[dict[str, Any]] = mask_utils.frPyObjects(objs, h, w)
    return rles


class CocoEvaluator:
    """Accumulates one decode path's detections and scores them (``scorer``: module docstring).

    Args:
        ground_truth: a COCO document (the dataset's JSON, or
            `lucid_train.data.formats.coco_documents.coco_document`).
        category_ids: the dataset category id of each contiguous label
            (`DatasetSchema.category_ids`).
        iou_types: which metrics to compute.
        kpt_sigmas: OKS sigmas ``(K,)``; default `keypoint_sigmas` of the ground truth's K.
        scorer: ``"faster"`` (default) or ``"pycocotools"``.
        index: ``coco_from_dict(ground_truth, scorer)`` built already (evaluators of the same
            ground truth share one: scoring adds only what it derives from each annotation).
    """

    def __init__(
        self,
        ground_truth: dict[str, Any],
        category_ids: Sequence[int],
        iou_types: Iterable[IouType] = ("bbox",),
        kpt_sigmas: npt.ArrayLike | None = None,
        scorer: Scorer = DEFAULT_SCORER,
        *,
        index: Any = None,
    ) -> None:
        self.scorer: Scorer = scorer
        self.gt = coco_from_dict(ground_truth, scorer) if index is None else index
        self.category_ids = np.asarray(category_ids, np.int64)
        self.iou_types = tuple(iou_types)
        known = {int(c["id"]) for c in ground_truth.get("categories", [])}
        unknown = sorted(set(self.category_ids.tolist()) - known)
        if unknown:
            raise ValueError(
                f"category_ids {unknown} are not categories of the ground truth ({sorted(known)})"
            )
        if kpt_sigmas is None and "keypoints" in self.iou_types:
            cats = [c for c in ground_truth["categories"] if c.get("keypoints")]
            kpt_sigmas = keypoint_sigmas(len(cats[0]["keypoints"]) if cats else 17)
        self.kpt_sigmas = None if kpt_sigmas is None else np.asarray(kpt_sigmas, np.float64)
        self._rows: list[_ImageRows] = []  # arrays, not a dict a row: see `results`
        # {iou_type: {category_id: (AP50-95, AP50)}}, filled by `compute`
        self.per_class: dict[str, dict[int, tuple[float, float]]] = {}

    def add(
        self,
        image_id: int,
        boxes: npt.ArrayLike,
        scores: npt.ArrayLike,
        labels: npt.ArrayLike,
        *,
        masks: npt.ArrayLike | torch.Tensor | None = None,
        keypoints: npt.ArrayLike | None = None,
    ) -> None:
        """Add the detections of one image.

        Args:
            image_id: the dataset's image id.
            boxes: ``(D, 4)`` xyxy source-image pixels.
            scores: ``(D,)`` confidences.
            labels: ``(D,)`` contiguous labels.
            masks: ``(D, H, W)`` bool at the source image size (segm); a tensor is run-length
                encoded where it is (`rle_encode`).
            keypoints: ``(D, K, 3)`` ``(x, y, score)`` source-image pixels (keypoints).
        """
        b = np.asarray(boxes, np.float64).reshape(-1, 4)
        s = np.array(scores, np.float64).reshape(-1)  # copies: kept until `compute`
        lab = np.asarray(labels, np.int64).reshape(-1)
        if not (b.shape[0] == s.shape[0] == lab.shape[0]):
            raise ValueError(
                f"expected as many boxes, scores and labels, got "
                f"{b.shape[0]}, {s.shape[0]}, {lab.shape[0]}"
            )
        cats = self.category_ids[lab]
        rles = None
        if isinstance(masks, torch.Tensor):
            rles = rle_encode(masks)
        elif masks is not None:
            m = np.asarray(masks, np.uint8)
            rles = mask_utils.encode(np.asfortranarray(m.transpose(1, 2, 0))) if len(m) else []
        kp = (
            None
            if keypoints is None or b.shape[0] == 0  # no detections: nothing to reshape
            else np.array(keypoints, np.float64).reshape(b.shape[0], -1, 3)
        )
        xywh = np.stack([b[:, 0], b[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], 1)
        flat_kp = None if kp is None else kp.reshape(b.shape[0], -1)
        self._rows.append(_ImageRows(int(image_id), xywh, s, cats, rles, flat_kp))

    @property
    def detections(self) -> list[dict[str, Any]]:
        """Every detection added, as COCO result dicts (new ones at each read): ``image_id``,
        ``category_id``, ``bbox`` (xywh), ``score``, and ``segmentation`` / ``keypoints``
        where they were given."""
        return self._dicts(self._rows, masks=True, keypoints=True)

    def reset(self) -> None:
        self._rows = []
        self.per_class = {}

    def compute(self) -> dict[str, dict[str, float]]:
        """``{iou_type: {stat name: value}}`` for every requested type."""
        out: dict[str, dict[str, float]] = {}
        with collector_paused():  # until the rows made for the scorer are freed
            for iou_type in self.iou_types:
                per_class: dict[int, tuple[float, float]] = {}
                # `results` makes new dicts: the scorer may change them (run_cocoeval's copy)
                out[iou_type] = _score(
                    self.gt, self.results(iou_type), iou_type, self.kpt_sigmas, per_class,
                    self.scorer,
                )  # fmt: skip
                self.per_class[iou_type] = per_class
        return out

    def results(self, iou_type: IouType) -> list[dict[str, Any]]:
        """The detections as a COCO results list for ``iou_type`` (what `compute` scores): a box
        list without masks and keypoints, or the detections with masks (segm) or keypoints.

        Rows are kept as each image's arrays and become dicts only here, once per scoring:
        a dict a row, made as they were added, had the collector walk hundreds of thousands
        of them all validation long (`collector_paused`)."""
        if iou_type == "bbox":
            return self._dicts(self._rows, masks=False, keypoints=False)
        if iou_type == "segm":
            return self._dicts([r for r in self._rows if r.rles is not None], True, True)
        return self._dicts([r for r in self._rows if r.keypoints is not None], True, True)

    @staticmethod
    def _dicts(rows: list[_ImageRows], masks: bool, keypoints: bool) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        with collector_paused():
            for r in rows:
                # Python numbers converted once per image, not element by element: the same
                # float64s.
                boxes, scores, cats = r.xywh.tolist(), r.scores.tolist(), r.cats.tolist()
                rles = r.rles if masks else None
                kps = r.keypoints.tolist() if keypoints and r.keypoints is not None else None
                for i, (bbox, score, cat) in enumerate(zip(boxes, scores, cats, strict=True)):
                    det: dict[str, Any] = {"image_id": r.image_id, "category_id": cat}
                    det["bbox"] = bbox
                    det["score"] = score
                    if rles is not None:
                        det["segmentation"] = rles[i]
                    if kps is not None:
                        det["keypoints"] = kps[i]
                    out.append(det)
        return out


class _ImageRows(NamedTuple):
    """One image's detections as `CocoEvaluator.add` took them."""

    image_id: int
    xywh: npt.NDArray[np.float64]  # (D, 4) source pixels
    scores: npt.NDArray[np.float64]  # (D,)
    cats: npt.NDArray[np.int64]  # (D,) dataset category ids
    rles: list[dict[str, Any]] | None  # D pycocotools RLEs
    keypoints: npt.NDArray[np.float64] | None  # (D, K * 3)


class MultiDecodeEvaluator:
    """One `CocoEvaluator` per decode path (e.g. ``e2e`` and ``nms``) over the same ground truth,
    sharing one ``index`` (``coco_from_dict(ground_truth, scorer)``; given, or built here)."""

    def __init__(
        self,
        paths: Sequence[str],
        ground_truth: dict[str, Any],
        category_ids: Sequence[int],
        iou_types: Iterable[IouType] = ("bbox",),
        kpt_sigmas: npt.ArrayLike | None = None,
        scorer: Scorer = DEFAULT_SCORER,
        *,
        index: Any = None,
    ) -> None:
        types = tuple(iou_types)
        if index is None:  # one copy and index for every path
            index = coco_from_dict(ground_truth, scorer)
        self.evaluators = {
            p: CocoEvaluator(ground_truth, category_ids, types, kpt_sigmas, scorer, index=index)
            for p in paths
        }

    def __getitem__(self, path: str) -> CocoEvaluator:
        return self.evaluators[path]

    def compute(self) -> dict[str, dict[str, dict[str, float]]]:
        """``{path: {iou_type: {stat: value}}}``."""
        return {p: e.compute() for p, e in self.evaluators.items()}
