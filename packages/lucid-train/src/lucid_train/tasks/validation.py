"""Scoring one forward on both decode paths: end-to-end top-k (one-to-one) and NMS (one-to-many).

`ValidationScorer` holds the evaluators of one validation epoch. For each batch it decodes both
paths from the same `ModelOutput`, maps what it found from the letterboxed canvas back to source
pixels with the batch's letterbox, and hands it to `MultiDecodeEvaluator` (COCO bbox, segm,
keypoints) or, for obb, to one `RotatedEvaluator` per path (rotated IoU is unchanged by the
letterbox's uniform scale and shift, so those are scored on the canvas).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lucid_kernels import host_split
from lucid_models import Detections, ModelOutput, nms_decode, topk_decode
from lucid_models.postprocessing import masks_on_source
from lucid_train.data.classes import ClassesError
from lucid_train.data.records import DatasetSchema, Task
from lucid_train.data.transport import Batch
from lucid_train.evaluation import MultiDecodeEvaluator, RotatedEvaluator
from lucid_train.evaluation.coco_eval import DEFAULT_SCORER, IouType, Scorer, coco_from_dict

__all__ = [
    "DECODE_PATHS",
    "DecodeSettings",
    "Scorers",
    "ValidationScorer",
    "decode_paths",
    "format_table",
]

DECODE_PATHS = ("e2e", "nms")
IOU_TYPES: dict[Task, tuple[IouType, ...]] = {
    "detect": ("bbox",),
    "segment": ("bbox", "segm"),
    "pose": ("bbox", "keypoints"),
    "obb": (),
}
# Metric name prefix per COCO iou type, as the authors' table labels them (Box, Mask, Pose).
PREFIX: dict[str, str] = {"bbox": "", "segm": "mask_", "keypoints": "pose_"}


@dataclass(frozen=True)
class DecodeSettings:
    """Validation decode settings (the authors': 300 detections, conf 0.001 (obb 0.01), IoU 0.7).

    Attributes:
        max_det: detections per image on both paths.
        score_threshold: both paths' score floor, the authors' ``conf``: their end-to-end
            validation keeps the top-k rows above it, their NMS path the candidates above it.
        iou_threshold: the NMS IoU.
        max_masks: segment: masks are built for the best ``max_masks`` rows only (COCO reads
            100 per image).
        multi_label: rank (anchor, class) pairs on both paths, so an anchor may be scored for
            a second class, as the authors' validator does (assumptions D21); prediction keeps
            one class per anchor.
    """

    max_det: int = 300
    score_threshold: float = 0.001
    iou_threshold: float = 0.7
    max_masks: int = 100
    multi_label: bool = True


def decode_paths(output: ModelOutput, settings: DecodeSettings) -> dict[str, Detections]:
    """Both decodes of one forward: ``{"e2e": top-k of one2one, "nms": NMS of one2many}``."""
    return {
        "e2e": topk_decode(
            output,
            max_det=settings.max_det,
            score_threshold=settings.score_threshold,
            multi_label=settings.multi_label,
        ),
        "nms": nms_decode(
            output,
            max_det=settings.max_det,
            score_threshold=settings.score_threshold,
            iou_threshold=settings.iou_threshold,
            multi_label=settings.multi_label,
        ),
    }


class ValidationScorer:
    """The evaluators of one validation (or test) epoch for one task.

    Args:
        task: the task; it decides the metrics (bbox; + segm; + keypoints; rotated for obb).
        schema: the dataset's labels (category ids for COCO).
        ground_truth: the split's COCO document (unused for obb).
        settings: decode settings.
        scorer: the COCO scorer (`lucid_train.evaluation.coco_eval`: ``"faster"``, the default,
            gives pycocotools' numbers; ``"pycocotools"`` is the reference itself).
        index: ``coco_from_dict(ground_truth, scorer)`` of an earlier epoch, to reuse (scoring
            only adds what it derives from each annotation); built here when None.
    """

    def __init__(
        self,
        task: Task,
        schema: DatasetSchema,
        ground_truth: dict[str, Any] | None,
        settings: DecodeSettings | None = None,
        scorer: Scorer = DEFAULT_SCORER,
        index: Any = None,
    ) -> None:
        self.task = task
        self.schema = schema
        self.settings = settings or DecodeSettings(score_threshold=0.01 if task == "obb" else 0.001)
        self.coco: MultiDecodeEvaluator | None = None
        self.rotated: dict[str, RotatedEvaluator] = {}
        if task == "obb":
            self.rotated = {p: RotatedEvaluator(schema.num_classes) for p in DECODE_PATHS}
        else:
            if ground_truth is None:
                raise ValueError(f"{task} validation needs the split's COCO ground truth")
            self.coco = MultiDecodeEvaluator(
                DECODE_PATHS, ground_truth, schema.category_ids, IOU_TYPES[task], scorer=scorer,
                index=index,
            )  # fmt: skip
        self.images = 0
        self.instances = 0
        # obb: each image's dataset id and letterbox, in the evaluators' order (results files)
        self.obb_images: list[tuple[int, tuple[float, float, float]]] = []
        self.rotated_results: dict[str, dict[str, float]] = {}  # the last `compute`, per path

    def update(self, output: ModelOutput, batch: Batch) -> dict[str, Detections]:
        """Decode both paths of ``output`` and add them (and, for obb, the ground truth) to the
        evaluators. Returns the decodes (canvas pixels) for overlays."""
        decoded = decode_paths(output, self.settings)
        counts = batch.counts()
        self.images += len(batch)
        self.instances += int(batch.batch_idx.numel())
        letterbox = batch.letterbox.cpu().tolist()
        orig_hw = batch.orig_hw.cpu().tolist()
        image_ids = batch.image_ids.cpu().tolist()
        gt_rboxes: list[Tensor] = []
        if self.task == "obb":
            split = [int(c) for c in counts.cpu().tolist()]
            # one transfer per field, images without instances keep their (0, ...) shapes
            gt_rboxes = host_split(list(torch.split(batch.rboxes, split)))
            gt_labels = host_split(list(torch.split(batch.labels, split)))
            gt_difficult = host_split(list(torch.split(batch.difficult, split)))
        for path, det in decoded.items():
            boxes = det.boxes.cpu().numpy()
            scores = det.scores.cpu().numpy()
            labels = det.labels.cpu().numpy()
            rotated = None if det.rotated is None else det.rotated.cpu().numpy()
            keypoints = None if det.keypoints is None else det.keypoints.cpu().numpy()
            for i in range(len(batch)):
                keep = labels[i] >= 0
                if self.task == "obb":
                    assert rotated is not None
                    if path == DECODE_PATHS[0]:
                        self.obb_images.append((int(image_ids[i]), tuple(letterbox[i])))
                    self.rotated[path].add(
                        rotated[i][keep],
                        scores[i][keep],
                        labels[i][keep],
                        gt_rboxes[i].numpy(),
                        gt_labels[i].numpy(),
                        gt_difficult[i].numpy(),
                    )
                    continue
                assert self.coco is not None
                gain, px, py = letterbox[i]
                b = (boxes[i][keep].reshape(-1, 2, 2) - np.array([px, py])) / gain
                b = b.reshape(-1, 4)
                h0, w0 = orig_hw[i]
                b[:, 0::2] = b[:, 0::2].clip(0, w0)
                b[:, 1::2] = b[:, 1::2].clip(0, h0)
                s, lab = scores[i][keep], labels[i][keep]
                kwargs: dict[str, Any] = {}
                if keypoints is not None:
                    k = keypoints[i][keep].copy()
                    k[..., :2] = (k[..., :2] - np.array([px, py])) / gain
                    kwargs["keypoints"] = k
                if det.mask_coefficients is not None and output.prototypes is not None:
                    n = min(int(keep.sum()), self.settings.max_masks)
                    b, s, lab = b[:n], s[:n], lab[:n]
                    kwargs = {k: v[:n] for k, v in kwargs.items()}
                    kwargs["masks"] = masks_on_source(  # run-length encoded where they are
                        det.mask_coefficients[i, :n].float(),
                        output.prototypes[i].float(),
                        b,
                        (gain, px, py),
                        int(batch.images.shape[1]),
                        (h0, w0),
                    )
                self.coco[path].add(image_ids[i], b, s, lab, **kwargs)
        return decoded

    def compute(self) -> dict[str, float]:
        """Flat metrics: ``{path}/mAP50-95``, ``{path}/mAP50`` (+ ``mask_``/``pose_`` ones) and
        ``mAP50-95`` (the end-to-end path's box metric, the one monitored)."""
        out: dict[str, float] = {}
        if self.task == "obb":
            for path, ev in self.rotated.items():
                r = self.rotated_results[path] = ev.compute()
                out[f"{path}/mAP50-95"] = float(r["mAP50_95"])
                out[f"{path}/mAP50"] = float(r["mAP50"])
        else:
            assert self.coco is not None
            for path, per_type in self.coco.compute().items():
                for iou_type, stats in per_type.items():
                    pre = PREFIX[iou_type]
                    out[f"{path}/{pre}mAP50-95"] = float(stats["mAP"])
                    out[f"{path}/{pre}mAP50"] = float(stats["mAP50"])
        out["mAP50-95"] = out["e2e/mAP50-95"]
        return out


def format_table(metrics: dict[str, float], images: int, instances: int) -> str:
    """A compact console table, one row per decode path::

    Path  Images  Instances  Box(mAP50  mAP50-95)  Mask(...)
    """
    kinds = [("", "Box")]
    if any(k.startswith("e2e/mask_") for k in metrics):
        kinds.append(("mask_", "Mask"))
    if any(k.startswith("e2e/pose_") for k in metrics):
        kinds.append(("pose_", "Pose"))
    head = f"{'Path':>6} {'Images':>7} {'Instances':>10}" + "".join(
        f" {label + '(mAP50':>11} {'mAP50-95)':>10}" for _, label in kinds
    )
    rows = [head]
    for path in DECODE_PATHS:
        row = f"{path:>6} {images:>7} {instances:>10}"
        for pre, _ in kinds:
            row += (
                f" {metrics[f'{path}/{pre}mAP50']:>11.4f} {metrics[f'{path}/{pre}mAP50-95']:>10.4f}"
            )
        rows.append(row)
    return "\n".join(rows)


class Scorers:
    """A fit's validation scorers: `ValidationScorer` for each validation (or test) epoch, with
    the split's scorer index (`coco_from_dict`) built once for all of them, and again only for
    another ground truth document (`LucidDataModule.coco_ground_truth` returns one per split;
    assumptions.md T91)."""

    def __init__(self) -> None:
        self._doc: dict[str, Any] | None = None
        self._index: Any = None

    def __call__(
        self, model: DatasetSchema, datamodule: Any, stage: str, settings: DecodeSettings
    ) -> ValidationScorer:
        """The scorer of one ``stage`` epoch of a model of schema ``model`` on ``datamodule``'s
        split. Refuses data of another class count, or whose categories carry other names than
        the model's classes at the same ids: the scorer names a prediction's class by the data's
        category list, so the model's classes would be scored as other ones."""
        task = model.task
        if datamodule is None or not hasattr(datamodule, "coco_ground_truth"):
            raise RuntimeError("validation needs a LucidDataModule (its COCO ground truth)")
        data = datamodule.schema
        if data.num_classes != model.num_classes:
            missing = sorted(set(model.category_ids) - set(data.category_ids))
            fix = (  # the model's ids can only be passed where the data has them all
                f"pass the model's ids to the data: LucidDataModule(classes="
                f"{list(model.category_ids)}) or --data.classes '{list(model.category_ids)}' (a "
                "fit leaves out categories without annotations, assumptions D22)"
                if not missing
                else f"the data has no category {missing}: the model was trained on other data; "
                "validate it on that data"
            )
            raise ClassesError(
                f"the model has {model.num_classes} classes (category ids "
                f"{list(model.category_ids)}: {', '.join(model.class_names)}), the {stage} data "
                f"{data.num_classes} ({list(data.category_ids)}); {fix}"
            )
        renamed = [  # the same count: another data set of as many classes, or renamed ones
            f"id {cid}: {a!r} (model) / {b!r} (data)"
            for cid, a, b in zip(
                model.category_ids, model.class_names, data.class_names, strict=True
            )
            if a != b
        ]
        unnamed = tuple(str(i) for i in range(model.num_classes))  # a module built without
        if renamed and model.class_names not in ((), unnamed):
            raise ClassesError(
                f"the model's classes and the {stage} data's name other things at the same ids "
                f"({'; '.join(renamed[:5])}{' ...' if len(renamed) > 5 else ''}): the model "
                "was trained on other data; validate it on the data it was trained on, or give "
                "the data's categories the model's names"
            )
        gt = None if task == "obb" else datamodule.coco_ground_truth(stage)
        if gt is not None and gt is not self._doc:
            self._doc, self._index = gt, coco_from_dict(gt)
        index = None if gt is None else self._index
        return ValidationScorer(task, datamodule.schema, gt, settings, index=index)
