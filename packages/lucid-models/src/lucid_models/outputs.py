"""Typed records for what the network returns and what decoding hands back.

Anchor layout, shared by every per-anchor tensor: the three levels (strides 8, 16, 32) in order,
each flattened row-major (y, then x), so row ``a`` belongs to anchor ``a`` of
:func:`lucid_models.anchors.make_anchors`. ``A = 8400`` at 640x640.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import Tensor

__all__ = ["BranchOutput", "Detections", "ModelOutput", "Task"]

Task = Literal["detect", "segment", "pose", "obb"]


@dataclass
class BranchOutput:
    """Raw predictions of one head branch (one-to-many or one-to-one); no activation applied.

    Attributes:
        boxes: ``(B, A, 4)`` distances (left, top, right, bottom) from the anchor centre in
            stride units. DFL-free: ``reg_max = 1``, no bins, no clamp.
        logits: ``(B, A, C)`` class logits.
        mask_coefficients: segment only, ``(B, A, M)`` raw prototype coefficients (``M = 32``).
        angles: obb only, ``(B, A)`` raw angle in radians (no squashing).
        keypoints: pose only, ``(B, A, K, 3)`` raw ``(dx, dy, visibility logit)``; the point is
            ``(anchor + (dx, dy)) * stride`` (assumptions.md M12).
        keypoint_sigmas: pose, training only, ``(B, A, K, 2)`` raw per-axis sigma (the loss
            applies its own activation).
    """

    boxes: Tensor
    logits: Tensor
    mask_coefficients: Tensor | None = None
    angles: Tensor | None = None
    keypoints: Tensor | None = None
    keypoint_sigmas: Tensor | None = None


@dataclass
class ModelOutput:
    """Everything one forward of the network produces.

    Attributes:
        one2one: the one-to-one branch. During training it reads *detached* neck features, as
            the authors' builds do, so its loss does not reach the backbone or neck.
        one2many: the one-to-many branch; ``None`` from a deploy view.
        anchor_points: ``(A, 2)`` anchor centres ``(x, y)`` in grid units of their level
            (cell index + 0.5), float32 even under autocast (assumptions.md M14).
        anchor_strides: ``(A, 1)`` the stride of each anchor's level (8, 16 or 32).
        prototypes: segment only, ``(B, M, ceil(H / 4), ceil(W / 4))`` mask prototypes. They
            read undetached features; a one-to-one mask loss should read ``prototypes.detach()``
            to match the authors' training.
        semantic_logits: segment, training mode only, ``(B, C, ceil(H / 8), ceil(W / 8))``.
    """

    one2one: BranchOutput
    one2many: BranchOutput | None
    anchor_points: Tensor
    anchor_strides: Tensor
    prototypes: Tensor | None = None
    semantic_logits: Tensor | None = None


@dataclass
class Detections:
    """Decoded detections at a fixed capacity ``k`` per image; padding rows come last.

    Scored rows form a leading run in descending score order, so a consumer may slice
    ``[:num]`` with ``num = (labels >= 0).sum(-1)`` instead of masking.

    Attributes:
        boxes: ``(B, k, 4)`` ``(x1, y1, x2, y2)`` in input-image pixels; zeros when padded.
            For obb this is the axis-aligned box of the rotated distances (see ``rotated``).
        scores: ``(B, k)`` sigmoid class scores in ``[0, 1]``; 0 when padded.
        labels: ``(B, k)`` int64 class ids; -1 when padded.
        anchor_indices: ``(B, k)`` int64 anchor row each detection came from; -1 when padded.
            Every per-detection extra below is gathered by these same indices.
        mask_coefficients: segment, ``(B, k, M)``.
        rotated: obb, ``(B, k, 5)`` ``(cx, cy, w, h, angle)`` in pixels and radians.
        keypoints: pose, ``(B, k, K, 3)`` ``(x, y)`` in pixels and visibility in ``[0, 1]``.
    """

    boxes: Tensor
    scores: Tensor
    labels: Tensor
    anchor_indices: Tensor
    mask_coefficients: Tensor | None = None
    rotated: Tensor | None = None
    keypoints: Tensor | None = None
