"""The oriented-box terms of one branch: ProbIoU box loss, rotated distance L1, angle loss.

The authors' obb loss replaces the detection loss's CIoU and L1 by rotated counterparts and adds
an angle term; the classification BCE is the detection one. :class:`OrientedLoss` is that branch
loss (``box``, ``cls``, ``l1``, ``angle``), assigning on rotated boxes with ProbIoU
(:func:`rotated_assigner`); :func:`rotated_box_terms` gives the three rotated terms alone:

* **box**: ``1 - ProbIoU`` (Hellinger form, variance floor 0.01 in stride units), gain 7.5;
* **l1**: L1 on the rotated ``(l, t, r, b)`` distances (measured along the box's own axes, the
  inverse of ``lucid_models.decode_rotated``), as fractions of the image side, gain 1.5
  (assumptions.md T26);
* **angle**: ``sin^2(2 dtheta)`` weighted by ``exp(-ln(w/h)^2 / 9)`` (strongest for near-squares,
  where ProbIoU barely sees the angle), gain 1.0 (assumptions.md T23; the recipe study's 0.25 is
  not the authors').

Each positive is weighted by its soft-target sum and every term divided by the branch's shared
normaliser ``max(sum of soft targets, 1)``, as the detection box terms are. Targets are gathered
with the assignment's ``target_index``; everything is dense over ``(B, A)`` and selected by
``torch.where`` (static shapes, no host synchronisation).

Before assignment the targets go through :func:`rotated_targets` (``OrientedLoss`` does it): it
moves angles into the training range (assumptions.md T24) and masks rotated boxes with a side
under 2 px out of the batch, as the authors drop them (assumptions.md T25).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_models.decode import decode_rotated
from lucid_models.outputs import BranchOutput, ModelOutput
from lucid_train.assign import TaskAlignedAssigner, candidates_in_rotated_boxes
from lucid_train.assign.padded_targets import PaddedTargets
from lucid_train.losses.boxes import distance_l1_loss
from lucid_train.losses.detection import (
    BranchInputs,
    BranchResult,
    DetectionLoss,
    ImageSize,
    LossTerms,
)
from lucid_train.losses.detection import normaliser as branch_normaliser
from lucid_train.losses.fills import filled
from lucid_train.losses.rotated_iou import (
    encode_rotated,
    probiou,
    rotated_overlaps,
    to_training_angle_range,
)

__all__ = [
    "OrientedLoss",
    "RotatedGains",
    "angle_loss",
    "rotated_assigner",
    "rotated_box_terms",
    "rotated_targets",
]

PROBIOU_LOSS_FLOOR = 0.01
"""Variance floor (stride units squared) of the ProbIoU loss, bounding sub-stride gradients."""

MIN_SIDE_PX = 2.0
"""Rotated boxes with a side under this many pixels are not trained on (the authors' filter)."""

ANGLE_ASPECT_LAMBDA = 3.0
"""The aspect sensitivity of the angle weight ``exp(-ln(w/h)^2 / lambda^2)``."""

# Background anchors read this box (grid units) so every formula stays finite where unused.
_UNIT_RBOX = (0.0, 0.0, 1.0, 1.0, 0.0)


@dataclass(frozen=True)
class RotatedGains:
    """Gains of the rotated terms (the authors' ``box``, ``dfl`` and ``angle`` defaults)."""

    box: float = 7.5
    l1: float = 1.5
    angle: float = 1.0


def rotated_targets(targets: PaddedTargets, min_side: float = MIN_SIDE_PX) -> PaddedTargets:
    """Targets ready for rotated assignment and loss.

    Angles move from the data's ``[-pi/2, pi/2)`` to the authors' ``[-pi/4, 3pi/4)`` (same
    rectangles), and rows whose ``w`` or ``h`` is under ``min_side`` pixels leave the mask (and
    ``counts``), so neither the assigner nor the loss sees them. Shapes are unchanged.

    Raises:
        ValueError: ``targets`` has no ``rboxes``.
    """
    if targets.rboxes is None:
        raise ValueError("rotated_targets needs PaddedTargets.rboxes (an obb batch)")
    rboxes = to_training_angle_range(targets.rboxes.float())
    mask = targets.mask & (rboxes[..., 2] >= min_side) & (rboxes[..., 3] >= min_side)
    return replace(targets, rboxes=rboxes, mask=mask, counts=mask.sum(1))


def angle_loss(
    pred_angles: Tensor, target_rboxes: Tensor, fg: Tensor, weight: Tensor, normaliser: Tensor
) -> Tensor:
    """``sum_fg sin^2(2 * wrap(dtheta)) * exp(-ln(w/h)^2 / 9) * weight / normaliser``.

    ``dtheta`` is wrapped into ``[-pi/2, pi/2]`` (a half-turn is the same box); ``w, h`` are the
    target's sides (their ratio, so any unit).

    Args:
        pred_angles: ``(B, A)`` raw radians.
        target_rboxes: ``(B, A, 5)``; anything finite with positive sides on background.
        fg: ``(B, A)`` bool.
        weight: ``(B, A)``.
        normaliser: 0-d.

    Returns:
        0-d float32.
    """
    w, h = target_rboxes[..., 2], target_rboxes[..., 3]
    log_aspect = ((w + 1e-9) / (h + 1e-9)).log()
    aspect_weight = (-log_aspect.square() / ANGLE_ASPECT_LAMBDA**2).exp()
    delta = pred_angles.float() - target_rboxes[..., 4]
    delta = delta - torch.round(delta / torch.pi) * torch.pi
    loss = (2 * delta).sin().square() * aspect_weight * weight
    return torch.where(fg, loss, 0.0).sum() / normaliser


def rotated_box_terms(
    inputs: BranchInputs,
    *,
    gains: RotatedGains = RotatedGains(),
    normaliser: Tensor | None = None,
) -> LossTerms:
    """The rotated box, L1 and angle terms of one branch, for its own assignment.

    Args:
        inputs: the branch (``boxes`` ``(B, A, 4)`` rotated distances in stride units and
            ``angles`` ``(B, A)`` are read), its anchors, its assignment (made against
            ``targets.rboxes``), the targets from :func:`rotated_targets` (``rboxes``
            ``(B, M, 5)`` pixels, gathered by ``assignment.target_index``) and the canvas size
            (the L1 is in fractions of it).
        gains: the three gains.
        normaliser: the branch's shared normaliser; defaults to ``max(sum of soft targets, 1)``.

    Returns:
        :class:`LossTerms` named ``box``, ``l1``, ``angle`` (gains applied).

    Raises:
        ValueError: the branch has no angles or the targets no rboxes.
    """
    norm = branch_normaliser(inputs.assignment) if normaliser is None else normaliser
    box, l1, angle = _rotated_parts(inputs, norm)
    return LossTerms.from_parts(
        [("box", gains.box * box), ("l1", gains.l1 * l1), ("angle", gains.angle * angle)]
    )


def _rotated_parts(inputs: BranchInputs, norm: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """ProbIoU, rotated L1 and angle losses before their gains (see :func:`rotated_box_terms`)."""
    branch, assignment, targets = inputs.branch, inputs.assignment, inputs.targets
    anchor_points, anchor_strides = inputs.anchor_points, inputs.anchor_strides
    if branch.angles is None or targets.rboxes is None:
        raise ValueError("rotated terms need branch.angles and targets.rboxes (obb)")
    fg = assignment.fg
    weight = assignment.weights
    strides = anchor_strides.float()
    target_px = to_training_angle_range(assignment.gather(targets.rboxes.float()))  # (B, A, 5)
    target = torch.cat((target_px[..., :4] / strides, target_px[..., 4:]), dim=-1)  # grid units
    target = torch.where(fg.unsqueeze(-1), target, filled(target, _UNIT_RBOX))
    # Decoding with unit strides keeps the prediction in grid units, like the targets.
    pred = decode_rotated(branch.boxes, branch.angles, anchor_points, torch.ones_like(strides))

    iou = probiou(pred, target, floor=PROBIOU_LOSS_FLOOR)  # (B, A)
    box = torch.where(fg, (1.0 - iou) * weight, 0.0).sum() / norm
    target_distances = encode_rotated(target, anchor_points.float())
    l1 = distance_l1_loss(branch.boxes, target_distances, strides, inputs.image_size, weight, norm)
    angle = angle_loss(branch.angles, target, fg, weight, norm)
    return box, l1, angle


def rotated_assigner(num_classes: int, *, one_to_one: bool = False) -> TaskAlignedAssigner:
    """The authors' rotated TAL: ProbIoU overlaps, rotated candidacy with STAL at 16 px.

    One-to-many ``topk = 10``; one-to-one ``topk = 7, topk2 = 1``.
    """
    topk, topk2 = (7, 1) if one_to_one else (10, None)
    return TaskAlignedAssigner(
        num_classes,
        topk=topk,
        topk2=topk2,
        overlap_fn=rotated_overlaps,
        candidate_fn=candidates_in_rotated_boxes,
    )


class OrientedLoss(DetectionLoss):
    """One obb branch: classification BCE plus the rotated box, L1 and angle terms.

    Assignment runs on rotated boxes (:func:`rotated_assigner`) against the targets after
    :func:`rotated_targets` (applied here, so pass the padded targets as they come).

    Args:
        num_classes: ``C``.
        one_to_one: which branch.
        assigner: overrides :func:`rotated_assigner`.
        gains: gains of the rotated terms.
        cls_gain: the classification gain (0.5).
    """

    names: tuple[str, ...] = ("box", "cls", "l1", "angle")

    def __init__(
        self,
        num_classes: int,
        *,
        one_to_one: bool = False,
        assigner: TaskAlignedAssigner | None = None,
        gains: RotatedGains = RotatedGains(),
        cls_gain: float = 0.5,
    ) -> None:
        if assigner is None:
            assigner = rotated_assigner(num_classes, one_to_one=one_to_one)
        super().__init__(
            num_classes,
            one_to_one=one_to_one,
            assigner=assigner,
            box_gain=gains.box,
            cls_gain=cls_gain,
            l1_gain=gains.l1,
        )
        self.gains = gains

    def decode(self, branch: BranchOutput, anchor_points: Tensor, anchor_strides: Tensor) -> Tensor:
        """Predicted rotated boxes ``(B, A, 5)`` in pixels and radians, with grad."""
        if branch.angles is None:
            raise ValueError("OrientedLoss needs branch.angles (an obb model)")
        return decode_rotated(branch.boxes, branch.angles, anchor_points, anchor_strides)

    def assigner_boxes(self, targets: PaddedTargets) -> Tensor:
        """The rotated ground truth ``(B, M, 5)``."""
        if targets.rboxes is None:
            raise ValueError("OrientedLoss needs PaddedTargets.rboxes (an obb batch)")
        return targets.rboxes

    def branch_terms(self, inputs: BranchInputs, pred_boxes: Tensor | None = None) -> LossTerms:
        """Gained ``box`` (ProbIoU), ``cls``, ``l1`` (rotated) and ``angle`` terms."""
        del pred_boxes
        norm = branch_normaliser(inputs.assignment)
        bce = F.binary_cross_entropy_with_logits(
            inputs.branch.logits.float(), inputs.assignment.target_scores, reduction="none"
        )
        box, l1, angle = _rotated_parts(inputs, norm)
        return LossTerms.from_parts(
            [
                ("box", self.gains.box * box),
                ("cls", self.cls_gain * bce.sum() / norm),
                ("l1", self.gains.l1 * l1),
                ("angle", self.gains.angle * angle),
            ]
        )

    def __call__(
        self,
        branch: BranchOutput,
        output: ModelOutput,
        targets: PaddedTargets,
        image_size: ImageSize,
    ) -> BranchResult:
        """Prepare the rotated targets, then assign and score as the detection loss does."""
        return super().__call__(branch, output, rotated_targets(targets), image_size)
