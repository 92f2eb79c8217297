"""Losses: padded targets, the per-branch detection loss and the dual (ProgLoss) loss.

* :func:`pad_targets` -> :class:`PaddedTargets`: a batch's flat targets at a fixed capacity
  with a validity mask (what the assigner and a recorded loss need).
* :class:`DetectionLoss`: one branch's assignment + CIoU / BCE / L1, returning a
  :class:`BranchResult` whose assignment task extras reuse; :class:`LossTerms` is what every
  loss returns (total to backpropagate, detached items to log).
* :class:`DualLoss` and :func:`o2m_weight`: ``w * L_one2many + (1 - w) * L_one2one`` with the
  authors' per-epoch schedule for ``w``, passed as a tensor.

Task terms live beside these: ``losses.segment``, ``losses.obb``, ``losses.pose`` (+ ``flow``).
"""

from lucid_train.assign.padded_targets import (
    PaddedTargets,
    batch_capacity_report,
    capacity_fits,
    pad_targets,
)
from lucid_train.losses.boxes import (
    boxes_to_distances,
    ciou_loss,
    distance_l1_loss,
    distances_to_boxes,
)
from lucid_train.losses.detection import (
    BranchInputs,
    BranchResult,
    DetectionLoss,
    LossTerms,
    normaliser,
)
from lucid_train.losses.progloss import DualLoss, o2m_weight

__all__ = [
    "BranchInputs",
    "BranchResult",
    "DetectionLoss",
    "DualLoss",
    "LossTerms",
    "PaddedTargets",
    "batch_capacity_report",
    "boxes_to_distances",
    "capacity_fits",
    "ciou_loss",
    "distance_l1_loss",
    "distances_to_boxes",
    "normaliser",
    "o2m_weight",
    "pad_targets",
]
