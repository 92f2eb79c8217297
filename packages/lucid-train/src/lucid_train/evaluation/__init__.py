"""Evaluation: COCO metrics (pycocotools' numbers, by a compiled scorer by default) and the
DOTA rotated protocol."""

from lucid_train.evaluation.coco_eval import (
    COCO_KPT_SIGMAS,
    DEFAULT_SCORER,
    SCORERS,
    UNIFORM_KPT_SIGMA,
    CocoEvaluator,
    MultiDecodeEvaluator,
    Scorer,
    coco_from_dict,
    keypoint_sigmas,
    per_class_ap,
    run_cocoeval,
)
from lucid_train.evaluation.detection_curves import CurveSet, DetectionDiagnostics
from lucid_train.evaluation.rotated import RotatedEvaluator, average_precision, rotated_iou_matrix

__all__ = [
    "COCO_KPT_SIGMAS",
    "DEFAULT_SCORER",
    "SCORERS",
    "UNIFORM_KPT_SIGMA",
    "CocoEvaluator",
    "CurveSet",
    "DetectionDiagnostics",
    "MultiDecodeEvaluator",
    "RotatedEvaluator",
    "Scorer",
    "average_precision",
    "coco_from_dict",
    "keypoint_sigmas",
    "per_class_ap",
    "rotated_iou_matrix",
    "run_cocoeval",
]
