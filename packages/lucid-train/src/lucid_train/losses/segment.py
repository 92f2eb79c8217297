"""The segmentation terms of one branch: instance-mask BCE and the semantic auxiliary loss.

Facts of the authors' YOLO26 segmentation loss (Ultralytics 8.4) that this follows:

* **seg**: each positive's mask logits are ``coefficients . prototypes`` on the stride-4
  prototype grid; per-pixel BCE against its assigned instance's mask, zeroed outside the assigned
  box (grid column ``i`` counts when ``x1 <= i < x2``, rows alike), averaged over the whole grid
  and divided by the box's area as a fraction of the image; summed over positives and divided by
  the number of positives (not the soft-target normaliser). Gain: the **box** gain 7.5
  (assumptions.md T20).
* **sem**: ``0.5 * BCE + 0.5 * Dice`` (Dice smoothing 1, per (image, class), then averaged) of
  ``semantic_logits`` against a one-hot class map made from the instance masks, zero where no
  instance lies, nearest-downsampled to the logits' grid; gain the box gain 7.5 too
  (assumptions.md T21). Zero when the branch has no positive in the batch, as the authors skip
  it then.
* The one-to-one branch reads ``prototypes.detach()`` and ``semantic_logits.detach()``: its
  loss trains only its own coefficients (assumptions.md M7), while its value still counts.
* **Assignment** (:class:`SegmentLoss`) scores pairs by ``(box CIoU + predicted-mask IoU) / 2``,
  the mask IoU only for each ground truth's ``3 * topk`` best pairs
  (:func:`mask_aware_overlaps`, assumptions.md T22).

Instance masks travel as ``(B, M, h, w)`` bool beside the padded targets
(:func:`pad_instance_masks`, :class:`SegmentTargets`); positives are packed into fixed slots
(:mod:`lucid_train.losses.positives`). Static shapes, no host synchronisation.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_models.outputs import BranchOutput, ModelOutput
from lucid_train.assign import Assignment, TaskAlignedAssigner, anchors_in_pixels
from lucid_train.assign.candidates import candidates_in_boxes
from lucid_train.assign.overlaps import pairwise_ciou
from lucid_train.assign.padded_targets import PaddedTargets
from lucid_train.losses.detection import (
    BranchResult,
    DetectionLoss,
    ImageSize,
    LossTerms,
)
from lucid_train.losses.fills import filled
from lucid_train.losses.positives import positional_sum, positive_slots, slot_capacity

__all__ = [
    "SegmentLoss",
    "SegmentTargets",
    "mask_aware_overlaps",
    "mask_loss",
    "masks_from_instance_map",
    "pad_instance_masks",
    "segment_terms",
    "semantic_loss",
    "semantic_target",
    "with_instance_map",
    "with_instance_masks",
]

DICE_SMOOTH = 1.0
MASK_PAIRS_PER_TOPK = 3
"""Mask IoU is scored for each ground truth's ``3 * topk`` best pairs by the box alignment."""
ALIGN_EPS = 1e-9
MASK_PIXELS_PER_CHUNK = 1 << 27
"""Bounds the predicted-mask pixels decoded at once by the mask-aware assignment."""


@dataclass
class SegmentTargets(PaddedTargets):
    """:class:`PaddedTargets` with the instance masks laid out like the boxes.

    Attributes:
        masks: ``(B, M, h, w)`` bool on the prototype grid (stride 4); all False on padding.
    """

    masks: Tensor | None = None


def pad_instance_masks(instance_masks: Tensor, targets: PaddedTargets) -> Tensor:
    """Flat per-instance masks ``(T, h, w)`` -> ``(B, M, h, w)`` by ``targets.instance_index``.

    Padding rows are all False. ``instance_masks`` is what ``Batch.instance_masks()`` returns.
    """
    B, M = targets.mask.shape
    h, w = instance_masks.shape[-2:]
    if instance_masks.shape[0] == 0:  # a shape, not a value: nothing to gather from
        return torch.zeros((B, M, h, w), dtype=torch.bool, device=instance_masks.device)
    index = targets.instance_index.clamp(min=0).to(instance_masks.device)
    picked = instance_masks.bool()[index.view(-1)].view(B, M, h, w)
    return picked & targets.mask.to(instance_masks.device)[..., None, None]


def masks_from_instance_map(instance_map: Tensor, targets: PaddedTargets) -> Tensor:
    """``(B, M, h, w)`` bool padded instance masks straight from the batch's ``(B, h, w)``
    instance map (``Batch.instance_map``: 0 background, ``k + 1`` the image's ``k``-th
    instance), equal to :func:`pad_instance_masks` of ``Batch.instance_masks()``. One compare
    on the map's device: the training step builds them after the transfer, where the host would
    expand and ship ``B * M`` full masks every batch."""
    device = instance_map.device
    counts = targets.counts.to(device)
    starts = torch.cumsum(counts, 0) - counts  # (B,) first flat instance of each image
    local = targets.instance_index.to(device) - starts[:, None]  # (B, M) k of each slot
    # -1 is no pixel's value, so padding rows stay empty.
    value = torch.where(targets.mask.to(device), local + 1, -1).to(instance_map.dtype)
    return instance_map[:, None] == value[..., None, None]


def with_instance_masks(targets: PaddedTargets, instance_masks: Tensor) -> SegmentTargets:
    """``targets`` plus its padded instance masks (see :func:`pad_instance_masks`)."""
    return _with_masks(targets, pad_instance_masks(instance_masks, targets))


def with_instance_map(targets: PaddedTargets, instance_map: Tensor) -> SegmentTargets:
    """``targets`` plus its padded instance masks built from the batch's instance map (see
    :func:`masks_from_instance_map`)."""
    return _with_masks(targets, masks_from_instance_map(instance_map, targets))


def _with_masks(targets: PaddedTargets, masks: Tensor) -> SegmentTargets:
    values = {f.name: getattr(targets, f.name) for f in fields(targets)}
    values["masks"] = masks
    return SegmentTargets(**values)


def mask_loss(
    coefficients: Tensor,
    prototypes: Tensor,
    assignment: Assignment,
    masks: Tensor,
    boxes: Tensor,
    image_size: ImageSize,
    capacity: int,
) -> Tensor:
    """The authors' instance-mask loss of one branch, before its gain: 0-d float32.

    Args:
        coefficients: ``(B, A, nm)`` the branch's mask coefficients.
        prototypes: ``(B, nm, h, w)`` (detach them for the one-to-one branch).
        assignment: the branch's assignment.
        masks: ``(B, M, h, w)`` bool instance masks on the prototype grid.
        boxes: ``(B, M, 4)`` xyxy pixels of the input canvas.
        image_size: ``(H, W)`` of the input canvas.
        capacity: positive slots per image (see :func:`slot_capacity`).
    """
    h, w = prototypes.shape[-2:]
    slots = positive_slots(assignment.fg, capacity)
    valid = slots.valid  # (B, P)
    coef = slots.gather(coefficients)  # (B, P, nm)
    logits = torch.einsum("bpn,bnhw->bphw", coef, prototypes).float()  # (B, P, h, w)
    row = assignment.target_index.gather(1, slots.anchor)  # (B, P)
    target = masks.gather(1, row[..., None, None].expand(-1, -1, h, w)).float()
    box = boxes.float().gather(1, row[..., None].expand(-1, -1, 4))  # (B, P, 4) pixels

    width, height = float(image_size[1]), float(image_size[0])
    box = box / filled(box, (width, height, width, height), torch.float32)  # image fractions
    area = (box[..., 2] - box[..., 0]) * (box[..., 3] - box[..., 1])  # (B, P)
    grid = box * filled(box, (w, h, w, h), torch.float32)
    cols = torch.arange(w, device=box.device, dtype=torch.float32)
    rows = torch.arange(h, device=box.device, dtype=torch.float32)
    in_x = (cols >= grid[..., 0:1]) & (cols < grid[..., 2:3])  # (B, P, w)
    in_y = (rows >= grid[..., 1:2]) & (rows < grid[..., 3:4])  # (B, P, h)
    crop = in_y[..., :, None] & in_x[..., None, :]  # (B, P, h, w)

    bce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    per_slot = torch.where(crop, bce, 0.0).mean(dim=(-2, -1))  # (B, P)
    area = torch.where(valid, area, 1.0)  # empty slots: keep the division finite
    per_slot = torch.where(valid, per_slot / area, 0.0)
    return positional_sum(per_slot) / valid.sum().clamp(min=1)  # bitwise the same for any M


def semantic_target(masks: Tensor, labels: Tensor, valid: Tensor, num_classes: int) -> Tensor:
    """Per-class union of the instance masks: ``(B, M, h, w)`` -> ``(B, C, h, w)`` float 0/1.

    The data's masks come from one instance map per image, so they do not overlap and each
    covered pixel gets its instance's class, as the authors' class map does.
    """
    classes = torch.arange(num_classes, device=labels.device)
    one_hot = ((labels[..., None] == classes) & valid[..., None]).float()  # (B, M, C)
    union = torch.einsum("bmhw,bmc->bchw", masks.float(), one_hot)
    return union.clamp(max=1.0)


def semantic_loss(logits: Tensor, target: Tensor) -> Tensor:
    """``0.5 * BCE + 0.5 * Dice`` of ``(B, C, h', w')`` logits against a ``(B, C, h, w)`` target.

    The target is nearest-downsampled to the logits' grid first (the authors' order).
    """
    logits = logits.float()
    if tuple(target.shape[-2:]) != tuple(logits.shape[-2:]):
        target = F.interpolate(target, size=tuple(logits.shape[-2:]), mode="nearest")
    bce = F.binary_cross_entropy_with_logits(logits, target)
    prob = logits.sigmoid()
    inter = (prob * target).sum(dim=(2, 3))
    union = prob.sum(dim=(2, 3)) + target.sum(dim=(2, 3))
    dice = 1.0 - (2.0 * inter + DICE_SMOOTH) / (union + DICE_SMOOTH)  # (B, C)
    return 0.5 * bce + 0.5 * dice.mean()


def segment_terms(
    branch: BranchOutput,
    output: ModelOutput,
    assignment: Assignment,
    targets: SegmentTargets,
    image_size: ImageSize,
    *,
    capacity: int,
    one_to_one: bool,
    gain: float = 7.5,
) -> LossTerms:
    """The ``seg`` and ``sem`` terms of one branch (gain applied to both).

    Args:
        branch: raw outputs; ``mask_coefficients`` ``(B, A, nm)`` is read.
        output: the forward's output; ``prototypes`` and (training) ``semantic_logits``.
        assignment: this branch's assignment.
        targets: with ``masks`` (see :func:`with_instance_masks`).
        image_size: ``(H, W)`` of the input canvas.
        capacity: positive slots per image.
        one_to_one: read detached prototypes and semantic logits (assumptions.md M7).
        gain: the authors' box gain, which scales both terms.

    Returns:
        :class:`LossTerms` named ``seg``, ``sem`` (``sem`` is 0 without semantic logits).

    Raises:
        ValueError: no coefficients, prototypes or masks.
    """
    if branch.mask_coefficients is None or output.prototypes is None or targets.masks is None:
        raise ValueError("segment_terms needs mask coefficients, prototypes and targets.masks")
    prototypes = output.prototypes.detach() if one_to_one else output.prototypes
    seg = mask_loss(
        branch.mask_coefficients,
        prototypes,
        assignment,
        targets.masks,
        targets.boxes,
        image_size,
        capacity,
    )
    if output.semantic_logits is None:
        sem = seg.new_zeros(())
    else:
        logits = output.semantic_logits.detach() if one_to_one else output.semantic_logits
        target = semantic_target(targets.masks, targets.labels, targets.mask, logits.shape[1])
        sem = torch.where(assignment.fg.any(), semantic_loss(logits, target), 0.0)
    return LossTerms.from_parts([("seg", gain * seg), ("sem", gain * sem)])


def mask_aware_overlaps(
    pred_scores: Tensor,
    pred_boxes: Tensor,
    coefficients: Tensor,
    prototypes: Tensor,
    targets: SegmentTargets,
    candidates: Tensor,
    image_size: ImageSize,
    *,
    alpha: float,
    beta: float,
    pairs: int,
) -> Tensor:
    """The authors' segmentation overlap: ``(box CIoU + predicted-mask IoU) / 2``, ``(B, M, A)``.

    Mask IoU is scored only for each ground truth's ``pairs`` best candidate anchors by the box
    alignment ``s^alpha * CIoU^beta`` (0 for the others, whose overlap is then half the CIoU, as
    the authors'). A predicted mask is its logits ``> 0`` on the prototype grid, cut to the
    predicted box; IoU against the instance mask, union floored at 1 cell.

    Args:
        pred_scores: ``(B, A, C)`` probabilities (detached).
        pred_boxes: ``(B, A, 4)`` xyxy pixels (detached).
        coefficients: ``(B, A, nm)`` (detached).
        prototypes: ``(B, nm, h, w)`` (detached).
        targets: with ``masks``.
        candidates: ``(B, M, A)`` bool, padding rows already False.
        image_size: ``(H, W)``.
        alpha, beta: the assigner's exponents.
        pairs: mask pairs per ground truth (``3 * topk``).
    """
    if targets.masks is None:
        raise ValueError("mask_aware_overlaps needs targets.masks")
    B, M, A = candidates.shape
    h, w = prototypes.shape[-2:]
    box_u = pairwise_ciou(targets.boxes.float(), pred_boxes.float())  # (B, M, A)
    labels = targets.labels[..., None].expand(-1, -1, A)
    scores = pred_scores.float().transpose(1, 2).gather(1, labels)  # (B, M, A)
    metric = torch.where(candidates, scores.pow(alpha) * box_u.pow(beta) + ALIGN_EPS, 0.0)
    k = min(pairs, A)
    top = metric.topk(k, dim=-1).indices  # (B, M, k)
    chosen = candidates.gather(-1, top)
    flat = top.view(B, M * k)
    coef = coefficients.float().gather(1, flat[..., None].expand(-1, -1, coefficients.shape[-1]))
    # pixels -> grid cells, as float32 quotients
    sx, sy = np.float32(w) / np.float32(image_size[1]), np.float32(h) / np.float32(image_size[0])
    scale = filled(pred_boxes, (float(sx), float(sy), float(sx), float(sy)), torch.float32)
    grid = pred_boxes.float().gather(1, flat[..., None].expand(-1, -1, 4)) * scale
    cols = torch.arange(w, device=grid.device, dtype=torch.float32)
    rows = torch.arange(h, device=grid.device, dtype=torch.float32)
    in_x = (cols >= grid[..., 0:1]) & (cols < grid[..., 2:3])  # (B, M k, w)
    in_y = (rows >= grid[..., 1:2]) & (rows < grid[..., 3:4])  # (B, M k, h)
    gt = targets.masks.view(B, M, 1, h * w)
    counts = _mask_counts_by_rows if prototypes.is_cuda else _mask_counts_by_cells
    # Images in chunks of about MASK_PIXELS_PER_CHUNK decoded pixels (a static split).
    per_image = M * k * h * w
    step = max(1, MASK_PIXELS_PER_CHUNK // max(per_image, 1))
    inters, unions = [], []
    for start in range(0, B, step):
        part = slice(start, start + step)
        logits = torch.einsum("bjn,bnhw->bjhw", coef[part], prototypes[part].float())
        inter, area = counts(logits, in_y[part], in_x[part], gt[part])  # (b, M, k) each
        inters.append(inter)
        unions.append(area + gt[part].sum(-1, dtype=torch.int32) - inter)
    inter, union = torch.cat(inters), torch.cat(unions)
    mask_iou = torch.where(chosen, inter / union.clamp(min=1), 0.0)  # (B, M, k)
    dense = torch.zeros_like(box_u).scatter(-1, top, mask_iou)
    return (box_u + dense) / 2


def _mask_counts_by_cells(
    logits: Tensor, in_y: Tensor, in_x: Tensor, gt: Tensor
) -> tuple[Tensor, Tensor]:
    """Cells of each predicted mask (``logits > 0`` inside its box's rows ``in_y`` and columns
    ``in_x``) that the instance mask ``gt`` holds too, and all its cells: ``(b, M, k)`` float32
    each, exact. ``logits`` ``(b, M k, h, w)``, ``in_y`` ``(b, M k, h)``, ``in_x``
    ``(b, M k, w)``, ``gt`` ``(b, M, 1, h w)`` bool. The CPU's route: boolean maps, counted in
    int32 (exact, and about twice as fast there as the default int64 sum of a bool)."""
    b, _, h, w = logits.shape
    M = gt.shape[1]
    pred = (logits > 0) & in_y[..., :, None] & in_x[..., None, :]
    pred = pred.view(b, M, -1, h * w)
    inter = (pred & gt).sum(-1, dtype=torch.int32).float()
    return inter, pred.sum(-1, dtype=torch.int32).float()


def _mask_counts_by_rows(
    logits: Tensor, in_y: Tensor, in_x: Tensor, gt: Tensor
) -> tuple[Tensor, Tensor]:
    """The counts of :func:`_mask_counts_by_cells`, equal to the last bit, in about half its
    memory traffic: the GPU's route.

    On CUDA the boolean route was a third of the captured segment step: every ``&`` writes a full
    map, and a bool summed as int32 is first copied to int32. Here the predicted mask is one 0/1
    map in the logits' dtype (``heaviside``), and the box enters by rows and columns: a product
    with the 0/1 column window counts each row's cells (at most ``w``, so exact while ``w`` is
    no more than the dtype's integer range), and a float32 sum over the window's rows adds
    those (exact below 2^24)."""
    b, j, h, w = logits.shape
    M = gt.shape[1]
    exact = {torch.float16: 2**11, torch.bfloat16: 2**8}.get(logits.dtype, 2**24)
    with torch.autocast(logits.device.type, enabled=False):  # the products stay in this dtype
        pred = torch.heaviside(logits, logits.new_zeros(()))  # 1 where logits > 0, else 0
        if w > exact:
            pred = pred.float()
        cols = in_x.to(pred.dtype)[..., None]  # (b, M k, w, 1)
        rows = in_y.float()
        area = (torch.matmul(pred, cols).squeeze(-1).float() * rows).sum(-1)
        both = pred.view(b, M, -1, h, w) * gt.view(b, M, 1, h, w).to(pred.dtype)
        inter = (torch.matmul(both.view(b, j, h, w), cols).squeeze(-1).float() * rows).sum(-1)
    return inter.view(b, M, -1), area.view(b, M, -1)


class SegmentLoss(DetectionLoss):
    """Detection loss of one branch plus the mask and semantic terms.

    Call it with :class:`SegmentTargets` (masks attached). Assignment scores each pair by
    :func:`mask_aware_overlaps`, the authors' mask-aware alignment (assumptions.md T22).

    Args:
        num_classes: ``C``.
        one_to_one: which branch; the one-to-one branch reads detached prototypes.
        assigner: overrides the default assigner.
        mask_gain: gain of ``seg`` and ``sem`` (the authors reuse the box gain, 7.5).
        box_gain, cls_gain, l1_gain: the detection gains.
    """

    names: tuple[str, ...] = ("box", "cls", "l1", "seg", "sem")

    def __init__(
        self,
        num_classes: int,
        *,
        one_to_one: bool = False,
        assigner: TaskAlignedAssigner | None = None,
        mask_gain: float = 7.5,
        box_gain: float = 7.5,
        cls_gain: float = 0.5,
        l1_gain: float = 1.5,
    ) -> None:
        super().__init__(
            num_classes,
            one_to_one=one_to_one,
            assigner=assigner,
            box_gain=box_gain,
            cls_gain=cls_gain,
            l1_gain=l1_gain,
        )
        self.mask_gain = mask_gain

    def assign(
        self,
        branch: BranchOutput,
        output: ModelOutput,
        targets: PaddedTargets,
        image_size: ImageSize,
        pred_boxes: Tensor,
    ) -> Assignment:
        """Assign with :func:`mask_aware_overlaps` (under ``no_grad``, on detached predictions)."""
        if not isinstance(targets, SegmentTargets):
            raise TypeError("SegmentLoss needs SegmentTargets (see with_instance_masks)")
        if branch.mask_coefficients is None or output.prototypes is None or targets.masks is None:
            raise ValueError("SegmentLoss needs mask coefficients, prototypes and targets.masks")
        assigner = self.assigner
        with torch.no_grad():
            anchors_px = anchors_in_pixels(output.anchor_points, output.anchor_strides)
            scores = branch.logits.detach().float().sigmoid()
            pred = pred_boxes.detach()
            candidates = candidates_in_boxes(
                anchors_px, targets.boxes.float(), assigner.small_target
            )
            candidates = candidates & targets.mask[..., None]
            overlaps = mask_aware_overlaps(
                scores,
                pred,
                branch.mask_coefficients.detach(),
                output.prototypes.detach(),
                targets,
                candidates,
                image_size,
                alpha=assigner.alpha,
                beta=assigner.beta,
                pairs=MASK_PAIRS_PER_TOPK * assigner.topk,
            )
        return assigner(scores, pred, anchors_px, targets, overlaps=overlaps, candidates=candidates)

    def extra_terms(
        self,
        result: BranchResult,
        branch: BranchOutput,
        output: ModelOutput,
        targets: PaddedTargets,
        image_size: ImageSize,
    ) -> LossTerms:
        """The ``seg`` and ``sem`` terms on this branch's assignment."""
        if not isinstance(targets, SegmentTargets):
            raise TypeError("SegmentLoss needs SegmentTargets (see with_instance_masks)")
        capacity = slot_capacity(self.assigner, targets.capacity, result.anchor_points.shape[0])
        return segment_terms(
            branch,
            output,
            result.assignment,
            targets,
            image_size,
            capacity=capacity,
            one_to_one=self.one_to_one,
            gain=self.mask_gain,
        )
