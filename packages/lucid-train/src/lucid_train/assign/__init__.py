"""Assignment: which anchors learn from which ground truth, and with what soft targets.

* :class:`TaskAlignedAssigner` - TAL with the small-target rule (STAL) and the one-to-one cut
  (``topk2``); returns an :class:`Assignment`. The one-to-many branch uses
  ``TaskAlignedAssigner(C, topk=10)``, the one-to-one branch ``TaskAlignedAssigner(C, topk=7,
  topk2=1)`` (the authors' YOLO26 settings).
* :func:`candidates_in_boxes` / :func:`candidates_in_rotated_boxes` - candidacy tests (pass the
  rotated one as ``candidate_fn`` for obb); :func:`pairwise_ciou`, :func:`box_ciou`,
  :func:`box_iou` - overlaps; :func:`anchors_in_pixels` - grid anchors to pixels.

Everything runs with static shapes and no host synchronisation (graph-capturable).
"""

from lucid_train.assign.candidates import (
    anchors_in_pixels,
    candidates_in_boxes,
    candidates_in_rotated_boxes,
)
from lucid_train.assign.overlaps import box_ciou, box_iou, pairwise_ciou
from lucid_train.assign.tal import Assignment, CandidateFn, OverlapFn, TaskAlignedAssigner

__all__ = [
    "Assignment",
    "CandidateFn",
    "OverlapFn",
    "TaskAlignedAssigner",
    "anchors_in_pixels",
    "box_ciou",
    "box_iou",
    "candidates_in_boxes",
    "candidates_in_rotated_boxes",
    "pairwise_ciou",
]
