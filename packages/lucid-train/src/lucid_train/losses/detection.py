"""The per-branch detection loss: assignment, CIoU, L1 on distances and BCE on soft targets.

For one head branch (:class:`~lucid_models.BranchOutput`), :class:`DetectionLoss`:

1. decodes the predicted boxes to xyxy pixels and assigns anchors with its own
   :class:`~lucid_train.assign.TaskAlignedAssigner` (on detached sigmoid scores and boxes);
2. scores ``box_gain * CIoU + cls_gain * BCE + l1_gain * L1``, every term divided by the one
   shared normaliser ``max(sum of soft targets, 1)`` (the authors' reduction, assumptions.md T7).

Task extras (masks, rotated terms, keypoints) subclass it and override :meth:`extra_terms`, or
compose it through :meth:`DetectionLoss.__call__`'s :class:`BranchResult`: either way they read
the same :class:`~lucid_train.assign.Assignment`, decoded boxes, anchors and normaliser as the
box loss - a task extra never re-assigns.

Capture contract: static shapes, no host synchronisation, no Python branch on tensor values.

Arithmetic: the loss reads the heads' outputs in float32 (assumptions.md T93). With
``LUCID_LOSS_ARITHMETIC=authors`` in the environment (`AUTHORS_ARITHMETIC`, an A/B switch for
the peer comparison, as ``LUCID_FUSE_BN_SILU`` is for the fused BatchNorm) the decoded boxes, the
scores the assigner ranks and the class targets are rounded to the heads' dtype where the
authors' loss, run inside their trainer's autocast, computes them so; in float32 it is a no-op.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_models.outputs import BranchOutput, ModelOutput
from lucid_train.assign import Assignment, TaskAlignedAssigner, anchors_in_pixels
from lucid_train.assign.padded_targets import PaddedTargets
from lucid_train.errors import LucidError
from lucid_train.losses.boxes import (
    boxes_to_distances,
    ciou_loss,
    distance_l1_loss,
    distances_to_boxes,
)

__all__ = ["AUTHORS_ARITHMETIC", "BranchResult", "DetectionLoss", "LossTerms", "normaliser"]

_ARITHMETIC = os.environ.get("LUCID_LOSS_ARITHMETIC", "float32")
# A misspelt switch would train the default unsaid: a loss is not built (nor a command run,
# `lucid_train.run.environment`) under one.
ARITHMETIC_ERROR = (
    None
    if _ARITHMETIC in ("float32", "authors")
    else f"LUCID_LOSS_ARITHMETIC={_ARITHMETIC!r}: expected 'float32' (the default) or 'authors'"
)
AUTHORS_ARITHMETIC = _ARITHMETIC == "authors"


def grid_boxes(distances: Tensor, anchor_points: Tensor) -> Tensor:
    """Predicted xyxy in stride units, float32: exact, or (`AUTHORS_ARITHMETIC`) computed in the
    heads' dtype as the authors' ``bbox_decode`` under autocast (float16 anchors and distances)."""
    if AUTHORS_ARITHMETIC:
        return distances_to_boxes(distances, anchor_points.to(distances.dtype)).float()
    return distances_to_boxes(distances.float(), anchor_points.float())


ImageSize = tuple[int, int] | Tensor


@dataclass
class LossTerms:
    """A loss to backpropagate and its named parts to log.

    Attributes:
        total: 0-d tensor (requires grad when the predictions do): what to call ``backward`` on.
        items: ``(N,)`` detached float32, the logged parts (gains applied, as the authors log;
            assumptions.md T8).
        names: ``N`` names, one per item.
        branches: set by :class:`~lucid_train.losses.progloss.DualLoss`: the one-to-many and
            one-to-one :class:`BranchResult`, for callers that log more than the items.
    """

    total: Tensor
    items: Tensor
    names: tuple[str, ...]
    branches: tuple[BranchResult, BranchResult] | None = field(default=None, repr=False)

    @classmethod
    def from_parts(cls, parts: Sequence[tuple[str, Tensor]]) -> LossTerms:
        """Sum already-gained 0-d ``(name, value)`` parts into a total with matching items."""
        if not parts:
            raise ValueError("expected at least one loss part")
        values = [value.float() for _, value in parts]
        return cls(
            total=torch.stack(values).sum(),
            items=torch.stack([v.detach() for v in values]),
            names=tuple(name for name, _ in parts),
        )

    def extend(self, other: LossTerms) -> LossTerms:
        """Both totals summed, items and names concatenated (``other``'s after ``self``'s)."""
        return LossTerms(
            total=self.total + other.total,
            items=torch.cat((self.items, other.items)),
            names=self.names + other.names,
        )

    def as_dict(self) -> dict[str, Tensor]:
        """``{name: 0-d detached tensor}`` for a logger (reading them is the caller's sync)."""
        return dict(zip(self.names, self.items.unbind(0), strict=True))


@dataclass
class BranchResult:
    """Everything one branch's loss computed, for task extras and logging.

    Attributes:
        terms: the branch's gained terms (detection, then any task extras).
        assignment: the branch's assignment; task extras gather their targets with it.
        pred_boxes: ``(B, A, 4)`` float32 decoded xyxy pixels, with grad.
        anchor_points: ``(A, 2)`` grid units (cell + 0.5).
        anchor_strides: ``(A, 1)``.
        anchors_px: ``(A, 2)`` anchor centres in pixels.
        normaliser: 0-d ``max(assignment.target_scores.sum(), 1)``, shared by every term.
    """

    terms: LossTerms
    assignment: Assignment
    pred_boxes: Tensor
    anchor_points: Tensor
    anchor_strides: Tensor
    anchors_px: Tensor
    normaliser: Tensor


@dataclass(frozen=True)
class BranchInputs:
    """What one branch's terms are computed from (every task's term functions take it whole).

    Attributes:
        branch: the branch's raw outputs.
        anchor_points: ``(A, 2)`` grid units (cell + 0.5).
        anchor_strides: ``(A, 1)``.
        targets: padded ground truth (a task's own subclass of `PaddedTargets`).
        assignment: this branch's assignment.
        image_size: ``(H, W)`` of the input canvas.
    """

    branch: BranchOutput
    anchor_points: Tensor
    anchor_strides: Tensor
    targets: PaddedTargets
    assignment: Assignment
    image_size: ImageSize


def normaliser(assignment: Assignment) -> Tensor:
    """The branch's shared normaliser ``max(sum of soft targets, 1)``, 0-d, on the device."""
    return assignment.target_scores.sum().clamp(min=1.0)


class DetectionLoss:
    """Detection loss of one head branch, with its own assigner.

    Args:
        num_classes: ``C``.
        one_to_one: which branch this scores; picks the default assigner (one-to-many
            ``topk = 10``, one-to-one ``topk = 7, topk2 = 1``) and tells task extras (e.g. a
            one-to-one mask loss reads detached prototypes).
        assigner: overrides the default assigner.
        box_gain: CIoU gain (authors 7.5).
        cls_gain: BCE gain (authors 0.5).
        l1_gain: L1 gain (authors' ``dfl`` 1.5, which scales L1 in their DFL-free head).
    """

    names: tuple[str, ...] = ("box", "cls", "l1")

    def __init__(
        self,
        num_classes: int,
        *,
        one_to_one: bool = False,
        assigner: TaskAlignedAssigner | None = None,
        box_gain: float = 7.5,
        cls_gain: float = 0.5,
        l1_gain: float = 1.5,
    ) -> None:
        if ARITHMETIC_ERROR is not None:
            raise LucidError(ARITHMETIC_ERROR)
        self.num_classes = num_classes
        self.one_to_one = one_to_one
        if assigner is None:
            assigner = (
                TaskAlignedAssigner(num_classes, topk=7, topk2=1)
                if one_to_one
                else TaskAlignedAssigner(num_classes, topk=10)
            )
        self.assigner = assigner
        self.box_gain = box_gain
        self.cls_gain = cls_gain
        self.l1_gain = l1_gain

    def decode(self, branch: BranchOutput, anchor_points: Tensor, anchor_strides: Tensor) -> Tensor:
        """Predicted xyxy pixels ``(B, A, 4)`` float32, with grad (the assigner sees them detached).

        Subclasses assigning rotated boxes return ``(B, A, 5)`` here.
        """
        if AUTHORS_ARITHMETIC:  # theirs: (pred_bboxes * stride_tensor) in float16, then float32
            dtype = branch.boxes.dtype
            grid = distances_to_boxes(branch.boxes, anchor_points.to(dtype))
            return (grid * anchor_strides.to(dtype)).float()
        return grid_boxes(branch.boxes, anchor_points) * anchor_strides.float()

    def assigner_boxes(self, targets: PaddedTargets) -> Tensor:
        """The ground truth the assigner compares predictions with: ``targets.boxes``."""
        return targets.boxes

    def assign_branch(
        self,
        branch: BranchOutput,
        anchor_points: Tensor,
        anchor_strides: Tensor,
        targets: PaddedTargets,
        pred_boxes: Tensor | None = None,
    ) -> Assignment:
        """Assign this branch's anchors (under ``no_grad``, on detached predictions).

        Args:
            branch: the branch's raw outputs.
            anchor_points: ``(A, 2)`` grid units; anchor_strides: ``(A, 1)``.
            targets: padded ground truth.
            pred_boxes: the branch's decoded boxes if already computed (see :meth:`decode`).
        """
        if pred_boxes is None:
            pred_boxes = self.decode(branch, anchor_points, anchor_strides)
        logits = branch.logits.detach()
        return self.assigner(
            logits.sigmoid().float() if AUTHORS_ARITHMETIC else logits.float().sigmoid(),
            pred_boxes.detach(),
            anchors_in_pixels(anchor_points, anchor_strides),
            targets,
            self.assigner_boxes(targets),
        )

    def assign(
        self,
        branch: BranchOutput,
        output: ModelOutput,
        targets: PaddedTargets,
        image_size: ImageSize,
        pred_boxes: Tensor,
    ) -> Assignment:
        """The assignment step of :meth:`__call__`: :meth:`assign_branch` by default; a task
        whose overlap needs more of the output (segmentation: the prototypes) overrides this."""
        del image_size
        points, strides = output.anchor_points, output.anchor_strides
        return self.assign_branch(branch, points, strides, targets, pred_boxes)

    def branch_terms(self, inputs: BranchInputs, pred_boxes: Tensor | None = None) -> LossTerms:
        """The gained ``box`` (CIoU), ``cls`` (BCE) and ``l1`` terms of one branch.

        Args:
            inputs: the branch (``boxes`` in stride units, ``logits``), its anchors and
                assignment, and the canvas size (normalises the L1 term); the targets are
                unused by the plain detection terms.
            pred_boxes: unused here (CIoU is taken on stride-unit boxes, as the authors do).

        Returns:
            :class:`LossTerms` named :attr:`names`.
        """
        del pred_boxes
        branch, assignment, image_size = inputs.branch, inputs.assignment, inputs.image_size
        anchor_points, anchor_strides = inputs.anchor_points, inputs.anchor_strides
        norm = normaliser(assignment)
        weight = assignment.weights  # (B, A)
        strides = anchor_strides.float()
        points = anchor_points.float()
        # CIoU and L1 in stride units of each anchor's level, as the authors compute them.
        target_grid = assignment.target_boxes[..., :4].float() / strides
        pred_grid = grid_boxes(branch.boxes, anchor_points)
        box = ciou_loss(pred_grid, target_grid, assignment.fg, weight, norm)
        l1 = distance_l1_loss(
            branch.boxes, boxes_to_distances(target_grid, points), strides, image_size, weight, norm
        )
        target_scores = assignment.target_scores
        if AUTHORS_ARITHMETIC:  # theirs: target_scores.to(dtype) before the BCE
            target_scores = target_scores.to(branch.logits.dtype).float()
        bce = F.binary_cross_entropy_with_logits(
            branch.logits.float(), target_scores, reduction="none"
        )
        cls = bce.sum() / norm
        return LossTerms.from_parts(
            [("box", self.box_gain * box), ("cls", self.cls_gain * cls), ("l1", self.l1_gain * l1)]
        )

    def extra_terms(
        self,
        result: BranchResult,
        branch: BranchOutput,
        output: ModelOutput,
        targets: PaddedTargets,
        image_size: ImageSize,
    ) -> LossTerms | None:
        """Hook for task extras (masks, angles, keypoints): gained terms or ``None`` (detect).

        ``result`` carries the assignment, decoded boxes, anchors and normaliser of the box loss;
        reuse them. :attr:`one_to_one` says which branch ``branch`` is.
        """
        del result, branch, output, targets, image_size
        return None

    def __call__(
        self,
        branch: BranchOutput,
        output: ModelOutput,
        targets: PaddedTargets,
        image_size: ImageSize,
    ) -> BranchResult:
        """Assign, score and add task extras for one branch of ``output``."""
        points, strides = output.anchor_points, output.anchor_strides
        pred_boxes = self.decode(branch, points, strides)
        assignment = self.assign(branch, output, targets, image_size, pred_boxes)
        inputs = BranchInputs(branch, points, strides, targets, assignment, image_size)
        terms = self.branch_terms(inputs, pred_boxes)
        result = BranchResult(
            terms=terms,
            assignment=assignment,
            pred_boxes=pred_boxes,
            anchor_points=points,
            anchor_strides=strides,
            anchors_px=anchors_in_pixels(points, strides),
            normaliser=normaliser(assignment),
        )
        extra = self.extra_terms(result, branch, output, targets, image_size)
        if extra is not None:
            result.terms = terms.extend(extra)
        return result
