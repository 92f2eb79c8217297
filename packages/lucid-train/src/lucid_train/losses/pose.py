"""The keypoint terms of one branch: OKS loss, visibility BCE and RLE with the RealNVP flow.

Facts of the authors' YOLO26 pose loss (Ultralytics 8.4) that this follows:

* Everything is in **stride units** of the positive's anchor: the predicted point is
  ``anchor + (dx, dy)`` (assumptions.md M12), the target point is divided by the anchor's stride,
  and the OKS area is the assigned box's ``w * h`` in stride units. Keypoints are not mapped into
  the box's own frame (assumptions.md T30).
* **pose** (gain 12): ``mean over (positive, keypoint) of f * (1 - exp(-e)) * labelled`` with
  ``e = d^2 / ((2 sigma_k)^2 * (area + 1e-9) * 2)`` and ``f = K / (labelled points + 1e-9)``.
  Sigmas are COCO's for 17 keypoints, else a uniform 0.072 (assumptions.md D12, T32).
* **kobj** (gain 1, assumptions.md T32): BCE of the visibility logit against "labelled"
  (``v != 0``), mean over every (positive, keypoint), unlabelled points included as negatives.
* **rle** (gain 1): over labelled points, ``e = (pred - target) / (sigma + 1e-9)`` with
  ``sigma = sigmoid(raw)`` floored at the raw dtype's smallest normal, ``e`` clamped to
  ``[-100, 100]``; per point ``sum_axes(log sigma + log(2 sigma) + |e|) - 2 log phi(e)``
  (``phi`` the flow density, counted once per axis), weighted per keypoint (the authors'
  ``RLE_WEIGHT`` for 17 keypoints, else ones), averaged over the labelled points and clamped at
  0 (assumptions.md T31). The density runs on ``lucid_kernels``' float32 island:
  ``2 * nll - sum_axes(|e| + log 2)`` is the authors' expression for the island's
  ``nll = sum_axes(|e| + log 2 + log sigma) - log phi(e)``.
* :class:`PoseLoss` assigns with keypoint OKS as the overlap and a pyramid-level gate on
  candidacy (``2 s <= sqrt(box area) <= 12 s``, open at the end levels, ungated when the gate
  leaves a box nothing), as the authors' pose assigner does (assumptions.md T33).

Positives are packed into fixed slots (:mod:`lucid_train.losses.positives`); labelled points
are selected by masks. No host synchronisation, static shapes. The slots grow with the target
capacity ``M``, so the terms do not depend on it even in the last bit: their sums run by
position (:func:`~lucid_train.losses.positives.positional_sum`), and the flow runs on chunks of
``FLOW_CHUNK_SLOTS`` slots (:func:`_flow_nll`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_kernels import rle_negative_log_likelihood
from lucid_models.outputs import BranchOutput, ModelOutput
from lucid_train.assign import Assignment, TaskAlignedAssigner, anchors_in_pixels
from lucid_train.assign.candidates import candidates_in_boxes
from lucid_train.assign.overlaps import pairwise_ciou
from lucid_train.assign.padded_targets import PaddedTargets
from lucid_train.evaluation.coco_eval import keypoint_sigmas
from lucid_train.losses.detection import (
    BranchInputs,
    BranchResult,
    DetectionLoss,
    ImageSize,
    LossTerms,
)
from lucid_train.losses.flow import RealNVP
from lucid_train.losses.positives import positional_sum, positive_slots, slot_capacity

__all__ = [
    "COCO_RLE_WEIGHTS",
    "PoseGains",
    "PoseLoss",
    "keypoint_overlaps",
    "keypoint_terms",
    "level_gated_candidates",
    "rle_keypoint_weights",
]

COCO_RLE_WEIGHTS = (1.0,) * 7 + (1.2, 1.2, 1.5, 1.5, 1.0, 1.0, 1.2, 1.2, 1.5, 1.5)
"""The authors' per-keypoint RLE weights for COCO's 17 (elbows/knees 1.2, wrists/ankles 1.5)."""

RESIDUAL_CLAMP = 100.0
SIGMA_EPS = 1e-9
OKS_AREA_SCALE = 0.53
"""The assigner's OKS reads ``0.53 * box area``, the authors' validation convention."""
LEVEL_RANGE = (2.0, 12.0)
"""Pose candidacy: a box of side ``sqrt(area)`` suits strides ``s`` with ``2 s <= side <= 12 s``."""

_LOG_2 = math.log(2.0)


@dataclass(frozen=True)
class PoseGains:
    """Gains of the keypoint terms (the authors' ``pose``, ``kobj`` and ``rle``)."""

    pose: float = 12.0
    kobj: float = 1.0
    rle: float = 1.0


def rle_keypoint_weights(num_keypoints: int) -> Tensor:
    """``(K,)`` float32 RLE weights: the authors' 17 for COCO's schema, else ones."""
    if num_keypoints == 17:
        return torch.tensor(COCO_RLE_WEIGHTS, dtype=torch.float32)
    return torch.ones(num_keypoints, dtype=torch.float32)


def _oks_sigmas(num_keypoints: int) -> Tensor:
    return torch.from_numpy(keypoint_sigmas(num_keypoints)).float()


@functools.lru_cache(maxsize=16)
def _default_constants(num_keypoints: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """The default OKS sigmas and RLE weights on ``device``, made once: a host-to-device copy
    cannot run inside a CUDA graph capture, and a recorded loss reads these very tensors."""
    return _oks_sigmas(num_keypoints).to(device), rle_keypoint_weights(num_keypoints).to(device)


FLOW_CHUNK_SLOTS = 64
"""Slots per flow call: every chunk has this shape whatever the capacity (see :func:`_flow_nll`)."""


def _flow_nll(diff: Tensor, sigma: Tensor, flow: RealNVP) -> Tensor:
    """The island's per-point NLL of ``diff / sigma`` (``(S, ..., 2)``, slots first), computed in
    chunks of :data:`FLOW_CHUNK_SLOTS` slots, the last one zero-padded.

    The flow's matrix products sum its parameter gradients over every row they are given, and a
    GPU GEMM picks its reduction order by shape: one product over all ``S`` slots would change
    those gradients' last bits with the capacity. Chunk ``j`` holds slots ``[64 j, 64 j + 64)``
    at any capacity, so the same kernel sums the same rows; autograd then adds the chunks in
    order, and chunks of empty slots (zero residual, zero gradient) add exact zeros."""
    slots = diff.shape[0]
    extra = -slots % FLOW_CHUNK_SLOTS
    if extra:
        pad = [0, 0] * (diff.dim() - 1) + [0, extra]
        diff = F.pad(diff, pad)
        sigma = F.pad(sigma, pad, value=1.0)
    parts = [
        rle_negative_log_likelihood(torch.zeros_like(d), s, d, flow)
        for d, s in zip(
            torch.split(diff, FLOW_CHUNK_SLOTS), torch.split(sigma, FLOW_CHUNK_SLOTS), strict=True
        )
    ]
    return torch.cat(parts)[:slots]


def _rle_loss(
    pred: Tensor,
    raw_sigma: Tensor,
    target: Tensor,
    labelled: Tensor,
    weights: Tensor,
    flow: RealNVP,
) -> Tensor:
    """Mean RLE over labelled points (before the clamp at 0).

    Args:
        pred: ``(S, ..., K, 2)`` predicted points, stride units, float32; ``S`` the slots
            (chunked for the flow: appended empty slots leave every bit unchanged).
        raw_sigma: ``(..., K, 2)`` raw sigma logits (any float dtype).
        target: ``(..., K, 2)`` float32.
        labelled: ``(..., K)`` bool.
        weights: ``(K,)``.
        flow: the residual density.
    """
    # The authors floor sigma at the smallest normal of the head's own dtype (fp16 under AMP).
    tiny = torch.finfo(raw_sigma.dtype).tiny
    sigma = raw_sigma.float().sigmoid().clamp(min=tiny)
    sigma_eps = sigma + SIGMA_EPS
    diff = pred - target
    finite = torch.isfinite(diff / sigma_eps).all(-1)  # (..., K)
    keep = labelled & finite
    diff = torch.where(keep[..., None], diff, 0.0)
    bound = RESIDUAL_CLAMP * sigma_eps
    diff = torch.minimum(torch.maximum(diff, -bound), bound)  # residual clamped to [-100, 100]
    # With pred = 0 and target = diff the island's residual is diff / sigma_eps, bit for bit.
    nll = _flow_nll(diff, sigma_eps, flow)
    residual = diff / sigma_eps
    per_point = 2.0 * nll - (residual.abs() + _LOG_2).sum(-1)
    # The island's log-sigma reads sigma + 1e-9; the authors' reads sigma (twice per axis).
    per_point = per_point + 2.0 * (sigma.log() - sigma_eps.log()).sum(-1)
    per_point = torch.where(keep, per_point * weights.to(per_point.device), 0.0)
    return positional_sum(per_point) / keep.sum().clamp(min=1)


def keypoint_terms(
    inputs: BranchInputs,
    flow: RealNVP,
    *,
    capacity: int,
    sigmas: Tensor | None = None,
    rle_weights: Tensor | None = None,
    gains: PoseGains = PoseGains(),
) -> LossTerms:
    """The ``pose``, ``kobj`` and ``rle`` terms of one branch (gains applied).

    Args:
        inputs: the branch (``keypoints`` ``(B, A, K, 3)`` and, in training,
            ``keypoint_sigmas`` ``(B, A, K, 2)`` are read; without sigmas ``rle`` is 0), its
            anchors and assignment, and the targets (``keypoints`` ``(B, M, K, 3)`` and
            ``boxes`` ``(B, M, 4)`` in pixels, gathered by ``assignment.target_index``).
        flow: the RLE residual density (trained; owned by the caller's module).
        capacity: positive slots per image (see
            :func:`~lucid_train.losses.positives.slot_capacity`).
        sigmas: ``(K,)`` OKS sigmas; default COCO's for 17 keypoints, else 0.072.
        rle_weights: ``(K,)``; default :func:`rle_keypoint_weights`.
        gains: the three gains.

    Returns:
        :class:`LossTerms` named ``pose``, ``kobj``, ``rle``.

    Raises:
        ValueError: the branch has no keypoints or the targets none.
    """
    branch, assignment, targets = inputs.branch, inputs.assignment, inputs.targets
    anchor_points, anchor_strides = inputs.anchor_points, inputs.anchor_strides
    if branch.keypoints is None or targets.keypoints is None:
        raise ValueError("keypoint_terms needs branch.keypoints and targets.keypoints (pose)")
    num_kpt = branch.keypoints.shape[2]
    device = branch.keypoints.device
    default_sigmas, default_weights = _default_constants(num_kpt, device)
    sigmas = default_sigmas if sigmas is None else sigmas.float().to(device)
    weights = default_weights if rle_weights is None else rle_weights.to(device)

    slots = positive_slots(assignment.fg, capacity)
    valid = slots.valid  # (B, P)
    raw = slots.gather(branch.keypoints).float()  # (B, P, K, 3)
    points = anchor_points.float()[slots.anchor]  # (B, P, 2)
    strides = anchor_strides.float()[slots.anchor]  # (B, P, 1)
    row = assignment.target_index.gather(1, slots.anchor)  # (B, P)
    gt = targets.keypoints.float().gather(
        1, row[..., None, None].expand(-1, -1, num_kpt, targets.keypoints.shape[-1])
    )  # (B, P, K, 3)
    box = targets.boxes.float().gather(1, row[..., None].expand(-1, -1, 4)) / strides  # (B, P, 4)

    pred_xy = raw[..., :2] + points[:, :, None, :]  # stride units
    gt_xy = gt[..., :2] / strides[..., None]
    labelled = (gt[..., 2] != 0) & valid[..., None]  # (B, P, K)
    slots_k = valid.sum().clamp(min=1) * num_kpt  # the authors' mean over (positive, keypoint)

    area = (box[..., 2] - box[..., 0]) * (box[..., 3] - box[..., 1])  # (B, P)
    dist2 = (pred_xy - gt_xy).square().sum(-1)  # (B, P, K)
    e = dist2 / ((2 * sigmas).square() * (area[..., None] + 1e-9) * 2)
    factor = num_kpt / (labelled.sum(-1, keepdim=True) + 1e-9)  # (B, P, 1)
    pose = positional_sum(torch.where(labelled, factor * (1 - torch.exp(-e)), 0.0)) / slots_k

    vis_target = (gt[..., 2] != 0).float()
    bce = F.binary_cross_entropy_with_logits(raw[..., 2], vis_target, reduction="none")
    kobj = positional_sum(torch.where(valid[..., None], bce, 0.0)) / slots_k

    if branch.keypoint_sigmas is None:
        rle = pose.new_zeros(())
    else:
        raw_sigma = slots.gather(branch.keypoint_sigmas)  # (B, P, K, 2)
        # Slots first: the flow runs on fixed chunks of slots (_flow_nll).
        pred_s, sigma_s, gt_s, labelled_s = (
            t.transpose(0, 1) for t in (pred_xy, raw_sigma, gt_xy, labelled)
        )
        rle = _rle_loss(pred_s, sigma_s, gt_s, labelled_s, weights, flow).clamp(min=0)
    return LossTerms.from_parts(
        [("pose", gains.pose * pose), ("kobj", gains.kobj * kobj), ("rle", gains.rle * rle)]
    )


def keypoint_overlaps(
    pred_keypoints: Tensor,
    targets: PaddedTargets,
    sigmas: Tensor,
    box_overlaps: Tensor,
    eps: float = 1e-9,
) -> Tensor:
    """Pairwise OKS of predicted and ground-truth keypoints, the pose assigner's overlap.

    ``OKS = sum_k exp(-d_k^2 / ((2 sigma_k)^2 * (0.53 * area + eps) * 2)) * v_k / max(sum v, 1)``
    over labelled points ``v_k``, pixels; a ground truth without labelled points keeps its box
    overlap. Accumulated keypoint by keypoint so memory stays ``(B, M, A)``.

    Args:
        pred_keypoints: ``(B, A, K, 2)`` pixels (detached).
        targets: ``keypoints`` ``(B, M, K, 3)`` and ``boxes`` ``(B, M, 4)`` pixels.
        sigmas: ``(K,)``.
        box_overlaps: ``(B, M, A)`` fallback overlap.

    Returns:
        ``(B, M, A)`` float32.
    """
    if targets.keypoints is None:
        raise ValueError("keypoint_overlaps needs targets.keypoints")
    gt = targets.keypoints.float()
    boxes = targets.boxes.float()
    area = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1]) * OKS_AREA_SCALE
    labelled = gt[..., 2] > 0  # (B, M, K)
    pred = pred_keypoints.float()
    oks = box_overlaps.new_zeros(box_overlaps.shape, dtype=torch.float32)
    for k in range(gt.shape[2]):
        d = (pred[:, None, :, k, :] - gt[:, :, None, k, :2]).square().sum(-1)  # (B, M, A)
        scale = (2 * sigmas[k]).square() * (area + eps) * 2  # (B, M)
        term = torch.exp(-d / scale[..., None])
        oks = oks + torch.where(labelled[..., k, None], term, 0.0)
    oks = oks / labelled.sum(-1, keepdim=True).clamp(min=1)
    return torch.where(labelled.any(-1, keepdim=True), oks, box_overlaps.float())


def level_gated_candidates(candidates: Tensor, gt_boxes: Tensor, anchor_strides: Tensor) -> Tensor:
    """Keep candidates on pyramid levels that suit each box (the authors' pose gate).

    An anchor of stride ``s`` stays a candidate of a box of side ``sqrt(w h)`` when
    ``2 s <= side <= 12 s``; the finest level is open below and the coarsest above. A box the gate
    would leave without candidates keeps its ungated ones.

    Args:
        candidates: ``(B, M, A)`` bool.
        gt_boxes: ``(B, M, 4)`` xyxy pixels.
        anchor_strides: ``(A, 1)``.
    """
    wh = (gt_boxes[..., 2:] - gt_boxes[..., :2]).float()
    side = (wh[..., 0] * wh[..., 1]).clamp(min=0).sqrt()[..., None]  # (B, M, 1)
    s = anchor_strides.float().view(-1)  # (A,)
    lo, hi = LEVEL_RANGE
    fits = ((side >= lo * s) | (s == s.min())) & ((side <= hi * s) | (s == s.max()))
    gated = candidates & fits
    return torch.where(gated.any(-1, keepdim=True), gated, candidates)


class PoseLoss(DetectionLoss):
    """Detection loss of one branch plus the keypoint terms, with the OKS-aware assigner.

    Args:
        num_classes: ``C``.
        flow: the shared RLE flow (one for both branches; the LightningModule owns and trains
            its parameters).
        one_to_one: which branch (picks the assigner's ``topk``/``topk2`` as in detection).
        assigner: overrides the default assigner.
        sigmas: ``(K,)`` OKS sigmas for the loss and the assigner; default as in
            :func:`keypoint_terms`.
        rle_weights: ``(K,)``; default :func:`rle_keypoint_weights`.
        pose_gains: gains of the keypoint terms.
        box_gain, cls_gain, l1_gain: the detection gains.
    """

    names: tuple[str, ...] = ("box", "cls", "l1", "pose", "kobj", "rle")

    def __init__(
        self,
        num_classes: int,
        flow: RealNVP,
        *,
        one_to_one: bool = False,
        assigner: TaskAlignedAssigner | None = None,
        sigmas: Tensor | None = None,
        rle_weights: Tensor | None = None,
        pose_gains: PoseGains = PoseGains(),
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
        self.flow = flow
        self.sigmas = sigmas
        self.rle_weights = rle_weights
        self.pose_gains = pose_gains

    def _sigmas(self, num_keypoints: int, device: torch.device) -> Tensor:
        if self.sigmas is None:
            return _default_constants(num_keypoints, device)[0]
        return self.sigmas.float().to(device)

    def assign_branch(
        self,
        branch: BranchOutput,
        anchor_points: Tensor,
        anchor_strides: Tensor,
        targets: PaddedTargets,
        pred_boxes: Tensor | None = None,
    ) -> Assignment:
        """Assign with keypoint OKS as the overlap and level-gated candidacy."""
        if branch.keypoints is None or targets.keypoints is None:
            raise ValueError("PoseLoss needs branch.keypoints and targets.keypoints")
        if pred_boxes is None:
            pred_boxes = self.decode(branch, anchor_points, anchor_strides)
        with torch.no_grad():
            anchors_px = anchors_in_pixels(anchor_points, anchor_strides)
            pred = pred_boxes.detach()
            strides = anchor_strides.float()
            kpt_px = branch.keypoints.detach()[..., :2].float() + anchor_points.float()[:, None]
            kpt_px = kpt_px * strides[:, None]  # (B, A, K, 2), assumptions.md M12
            sigmas = self._sigmas(branch.keypoints.shape[2], pred.device)
            box_overlaps = pairwise_ciou(targets.boxes.float(), pred)
            overlaps = keypoint_overlaps(kpt_px, targets, sigmas, box_overlaps)
            plain = candidates_in_boxes(
                anchors_px, targets.boxes.float(), self.assigner.small_target
            )
            candidates = level_gated_candidates(plain, targets.boxes, anchor_strides)
        return self.assigner(
            branch.logits.detach().float().sigmoid(),
            pred,
            anchors_px,
            targets,
            overlaps=overlaps,
            candidates=candidates,
        )

    def extra_terms(
        self,
        result: BranchResult,
        branch: BranchOutput,
        output: ModelOutput,
        targets: PaddedTargets,
        image_size: ImageSize,
    ) -> LossTerms:
        """The keypoint terms on this branch's assignment."""
        del output
        capacity = slot_capacity(self.assigner, targets.capacity, result.anchor_points.shape[0])
        num_kpt = 0 if branch.keypoints is None else branch.keypoints.shape[2]
        inputs = BranchInputs(
            branch,
            result.anchor_points,
            result.anchor_strides,
            targets,
            result.assignment,
            image_size,
        )
        return keypoint_terms(
            inputs,
            self.flow,
            capacity=capacity,
            sigmas=self._sigmas(num_kpt, result.anchor_points.device),
            rle_weights=self.rle_weights,
            gains=self.pose_gains,
        )
