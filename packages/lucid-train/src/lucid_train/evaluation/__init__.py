"""Evaluation: COCO metrics through pycocotools and the DOTA rotated protocol."""

from lucid_train.evaluation.coco_eval import (
    COCO_KPT_SIGMAS,
    UNIFORM_KPT_SIGMA,
    CocoEvaluator,
    MultiDecodeEvaluator,
    coco_from_dict,
    keypoint_sigmas,
    per_class_ap,
    run_cocoeval,
)
from lucid_train.evaluation.detection_curves import CurveSet, DetectionDiagnostics
from lucid_train.evaluation.rotated import RotatedEvaluator, average_precision, rotated_iou_matrix

__all__ = [
    "COCO_KPT_SIGMAS",
    "UNIFORM_KPT_SIGMA",
    "CocoEvaluator",
    "CurveSet",
    "DetectionDiagnostics",
    "MultiDecodeEvaluator",
    "RotatedEvaluator",
    "average_precision",
    "coco_from_dict",
    "keypoint_sigmas",
    "per_class_ap",
    "rotated_iou_matrix",
    "run_cocoeval",
]
