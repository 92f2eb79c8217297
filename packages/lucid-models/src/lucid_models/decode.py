"""Turning raw head outputs into detections: end-to-end top-k and the NMS path.

* :func:`topk_decode` reads the one-to-one branch: sigmoid, best class per anchor, the ``k``
  best anchors per image; no IoU, no NMS (the end-to-end path).
* :func:`nms_decode` reads the one-to-many branch: best class per anchor, a score floor,
  class-wise NMS (greedy by box IoU; the authors' Fast-NMS by ProbIoU for rotated boxes), the
  ``k`` best survivors.

Both return a fixed-shape :class:`Detections` whose per-detection extras (mask coefficients,
rotated boxes, keypoints) are gathered by the same anchor indices as the boxes. Decoding runs in
float32 whatever the forward's dtype. One label per anchor (assumptions.md M9).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_models.nms import rotated_fast_nms, spanned_nms
from lucid_models.outputs import BranchOutput, Detections, ModelOutput

__all__ = [
    "assemble_masks",
    "decode_boxes",
    "decode_keypoints",
    "decode_masks",
    "decode_rotated",
    "nms_decode",
    "topk_decode",
]

MAX_NMS = 30_000  # candidates an image the NMS path sorts at most (the authors' ``max_nms``)


def decode_boxes(distances: Tensor, anchor_points: Tensor, anchor_strides: Tensor) -> Tensor:
    """``(l, t, r, b)`` distances in stride units -> ``(x1, y1, x2, y2)`` pixels.

    Args:
        distances: ``(..., A, 4)``.
        anchor_points: ``(A, 2)`` in grid units.
        anchor_strides: ``(A, 1)``.

    Returns:
        ``(..., A, 4)`` with ``x1 = (ax - l) * s``, ``y1 = (ay - t) * s``, ``x2 = (ax + r) * s``,
        ``y2 = (ay + b) * s``.
    """
    d = distances.float()
    lt, rb = d[..., :2], d[..., 2:]
    return torch.cat((anchor_points - lt, anchor_points + rb), dim=-1) * anchor_strides


def decode_rotated(
    distances: Tensor, angles: Tensor, anchor_points: Tensor, anchor_strides: Tensor
) -> Tensor:
    """Rotated distances -> ``(cx, cy, w, h, angle)`` in pixels and radians.

    The distances are measured from the anchor along the box's own rotated axes, as in the
    authors' builds (assumptions.md M13): the centre is the anchor plus
    ``((r - l) / 2, (b - t) / 2)`` rotated by the angle, the size is ``(l + r, t + b)``. An angle
    of 0 gives the axis-aligned decode.

    Args:
        distances: ``(..., A, 4)`` in stride units.
        angles: ``(..., A)`` radians, raw.
        anchor_points: ``(A, 2)`` grid units.
        anchor_strides: ``(A, 1)``.

    Returns:
        ``(..., A, 5)``.
    """
    d = distances.float()
    lt, rb = d[..., :2], d[..., 2:]
    theta = angles.float().unsqueeze(-1)  # (..., A, 1)
    cos, sin = theta.cos(), theta.sin()
    half = (rb - lt) / 2  # centre offset in the box frame, (..., A, 2)
    dx = half[..., :1] * cos - half[..., 1:] * sin
    dy = half[..., :1] * sin + half[..., 1:] * cos
    centre = (anchor_points + torch.cat((dx, dy), dim=-1)) * anchor_strides
    return torch.cat((centre, (lt + rb) * anchor_strides, theta), dim=-1)


def decode_keypoints(raw: Tensor, anchor_points: Tensor, anchor_strides: Tensor) -> Tensor:
    """Raw ``(dx, dy, visibility logit)`` -> ``(x, y)`` pixels and visibility in ``[0, 1]``.

    Args:
        raw: ``(..., A, K, 3)``.
        anchor_points: ``(A, 2)`` grid units, or gathered per image ``(..., A, 2)``.
        anchor_strides: ``(A, 1)``, or gathered ``(..., A, 1)``.

    Returns:
        ``(..., A, K, 3)`` with ``(x, y) = (anchor + (dx, dy)) * stride`` (unbounded: a point
        may lie off the image) and ``sigmoid`` of the visibility logit.
    """
    raw = raw.float()
    xy = (raw[..., :2] + anchor_points[..., None, :]) * anchor_strides[..., None, :]
    return torch.cat((xy, raw[..., 2:].sigmoid()), dim=-1)


def assemble_masks(coefficients: Tensor, prototypes: Tensor) -> Tensor:
    """Instance mask logits ``sum_m c_m P_m``: ``(B, k, M), (B, M, h, w) -> (B, k, h, w)``."""
    return torch.einsum("bkm,bmhw->bkhw", coefficients.float(), prototypes.float())


def decode_masks(
    detections: Detections,
    prototypes: Tensor,
    image_size: tuple[int, int],
    threshold: float = 0.5,
) -> Tensor:
    """Binary instance masks on the input canvas.

    Order: assemble the gathered coefficients, upsample the logits bilinearly
    (``align_corners=False``) to the canvas, sigmoid, zero outside each predicted box,
    threshold. Padding rows give empty masks.

    Args:
        detections: from a segmentation decode (``mask_coefficients`` set).
        prototypes: ``(B, M, h, w)``.
        image_size: canvas ``(H, W)`` the boxes are in.
        threshold: probability above which a pixel belongs to the instance.

    Returns:
        ``(B, k, H, W)`` bool. Memory grows as ``B * k * H * W``; slice the scored rows first
        for large canvases.
    """
    if detections.mask_coefficients is None:
        raise ValueError("expected detections from a segmentation model (mask_coefficients)")
    logits = assemble_masks(detections.mask_coefficients, prototypes)  # (B, k, h, w)
    H, W = image_size
    logits = F.interpolate(logits, size=(H, W), mode="bilinear", align_corners=False)
    ys = torch.arange(H, device=logits.device, dtype=torch.float32)[:, None] + 0.5  # (H, 1)
    xs = torch.arange(W, device=logits.device, dtype=torch.float32)[None, :] + 0.5  # (1, W)
    x1, y1, x2, y2 = (c[..., None, None] for c in detections.boxes.unbind(-1))  # (B, k, 1, 1)
    inside = (xs >= x1) & (xs < x2) & (ys >= y1) & (ys < y2)  # (B, k, H, W)
    valid = (detections.labels >= 0)[..., None, None]
    return (logits.sigmoid() > threshold) & inside & valid


def _gather(values: Tensor, indices: Tensor) -> Tensor:
    """``(B, A, *rest)`` gathered along anchors by ``(B, k)`` -> ``(B, k, *rest)``."""
    idx = indices.view(*indices.shape, *([1] * (values.dim() - 2)))
    return values.gather(1, idx.expand(-1, -1, *values.shape[2:]))


def _detections(
    branch: BranchOutput,
    output: ModelOutput,
    indices: Tensor,
    scores: Tensor,
    labels: Tensor,
    valid: Tensor,
) -> Detections:
    """Gather boxes and extras of ``(B, k)`` anchor ``indices``; zero/-1 the invalid rows."""
    safe = indices.clamp(min=0)
    points, strides = output.anchor_points, output.anchor_strides
    boxes = decode_boxes(_gather(branch.boxes, safe), points[safe], strides[safe])
    det = Detections(
        boxes=boxes * valid[..., None],
        scores=torch.where(valid, scores, torch.zeros_like(scores)),
        labels=torch.where(valid, labels, torch.full_like(labels, -1)),
        anchor_indices=torch.where(valid, indices, torch.full_like(indices, -1)),
    )
    if branch.mask_coefficients is not None:
        det.mask_coefficients = _gather(branch.mask_coefficients.float(), safe)
    if branch.angles is not None:
        rotated = decode_rotated(
            _gather(branch.boxes, safe), _gather(branch.angles, safe), points[safe], strides[safe]
        )
        det.rotated = rotated * valid[..., None]
    if branch.keypoints is not None:
        kpts = _gather(branch.keypoints, safe)  # (B, k, K, 3)
        det.keypoints = decode_keypoints(kpts, points[safe], strides[safe]) * valid[..., None, None]
    return det


def _rows(values: Tensor, first: int, count: int, top: Tensor | None) -> Tensor:
    """An image's ``count`` rows of a batch's candidates from row ``first`` (``top`` of them)."""
    own = values[first : first + count]
    return own if top is None else own[top]


def topk_decode(
    output: ModelOutput,
    max_det: int = 300,
    score_threshold: float = 0.0,
    *,
    multi_label: bool = False,
) -> Detections:
    """End-to-end decode of the one-to-one branch: top ``max_det`` anchors, no NMS.

    Args:
        output: a forward's output (full model or deploy view).
        max_det: ``k``, detections per image; rows beyond the anchor count are padding.
        score_threshold: rows scoring at or below it are padding.
        multi_label: rank (anchor, class) pairs instead of anchors by their best class: the
            ``max_det`` best anchors, then the ``max_det`` best of their classes' scores, so an
            anchor may give a row for a second class (the authors' validation, assumptions D21).

    Returns:
        :class:`Detections` of shape ``(B, max_det, ...)``.
    """
    branch = output.one2one
    probs = branch.logits.float().sigmoid()  # (B, A, C)
    best, labels = probs.max(dim=-1)  # (B, A) each
    k = min(max_det, best.shape[1])
    scores, indices = best.topk(k, dim=1)  # (B, k), descending
    labels = labels.gather(1, indices)
    if multi_label:
        classes = probs.shape[-1]
        pairs = _gather(probs, indices).flatten(1)  # (B, k * C): the k anchors' every class
        scores, flat = pairs.topk(k, dim=1)
        labels = flat % classes
        indices = indices.gather(1, flat // classes)
    if k < max_det:  # fewer anchors than max_det: pad to the fixed shape
        pad = max_det - k
        scores = F.pad(scores, (0, pad))
        indices = F.pad(indices, (0, pad), value=-1)
        labels = F.pad(labels, (0, pad), value=-1)
    valid = (scores > score_threshold) & (indices >= 0)
    return _detections(branch, output, indices, scores, labels, valid)


def nms_decode(
    output: ModelOutput,
    max_det: int = 300,
    score_threshold: float = 0.001,
    iou_threshold: float = 0.7,
    *,
    multi_label: bool = False,
) -> Detections:
    """NMS decode of the one-to-many branch, padded to ``max_det`` rows per image.

    Each anchor keeps its best class (with ``multi_label``, every class scoring above
    ``score_threshold``: the authors' validation, assumptions D21); the candidates scoring above
    ``score_threshold`` (at most the `MAX_NMS` best, as the authors cap them) go through
    class-wise NMS: greedy by box IoU (`batched_nms`), or for rotated boxes the authors'
    Fast-NMS by ProbIoU (`rotated_fast_nms`, assumptions M10); the ``max_det`` best survivors
    are kept.

    Raises:
        ValueError: the output has no one-to-many branch (a deploy view).
    """
    branch = output.one2many
    if branch is None:
        raise ValueError("nms_decode reads the one-to-many branch; a deploy view has none")
    probs = branch.logits.float().sigmoid()  # (B, A, C)
    points, strides = output.anchor_points, output.anchor_strides
    B, device = probs.shape[0], probs.device
    # Every image's candidates at once, in each image's (anchor, class) order: one nonzero and
    # one read of the counts for the batch, where each image read the device for its own.
    if multi_label:
        image, anchor, label = (probs > score_threshold).nonzero().unbind(1)
        score = probs[image, anchor, label]
    else:
        best, labels = probs.max(dim=-1)
        image, anchor = (best > score_threshold).nonzero().unbind(1)
        score, label = best[image, anchor], labels[image, anchor]
    counts = torch.bincount(image, minlength=B).tolist()
    # Boxes are elementwise arithmetic of their own anchor's values: decoded for the whole
    # batch, each row is what the image's own decode gives.
    boxes = (
        None
        if branch.angles is not None
        else decode_boxes(branch.boxes[image, anchor], points[anchor], strides[anchor])
    )
    # Each image with candidates: its index, first row, row count and its top-scored rows
    # (None: all of them), then the boxes' spans, whose finiteness is read once for all.
    parts: list[tuple[int, int, int, Tensor | None]] = []
    first = 0
    for b, n in enumerate(counts):
        if n:
            top = score[first : first + n].topk(MAX_NMS).indices if n > MAX_NMS else None
            parts.append((b, first, n, top))  # over the authors' cap: the best MAX_NMS
        first += n
    owns = [] if boxes is None else [_rows(boxes, first, n, top) for _, first, n, top in parts]
    spans = [own.max() - own.min() + 1 for own in owns]
    finite: list[bool] = torch.stack(spans).isfinite().tolist() if spans else []
    kept: list[Tensor] = []  # the batch's rows of the candidates each image keeps, in its order
    image_of: list[Tensor] = []
    slot: list[Tensor] = []
    for i, (b, first, n, top) in enumerate(parts):
        own_score, own_label = _rows(score, first, n, top), _rows(label, first, n, top)
        if boxes is None:  # rotated: decoded an image at a time (cos and sin, not elementwise sums)
            assert branch.angles is not None
            own_anchor = _rows(anchor, first, n, top)
            rbox = decode_rotated(
                branch.boxes[b, own_anchor], branch.angles[b, own_anchor], points[own_anchor],
                strides[own_anchor],
            )  # fmt: skip
            keep = rotated_fast_nms(rbox, own_score, own_label, iou_threshold, max_det)
        else:
            keep = spanned_nms(
                owns[i], own_score, own_label, spans[i], finite[i], iou_threshold, max_det
            )
        kept.append(first + (keep if top is None else top[keep]))
        image_of.append(torch.full((len(keep),), b, dtype=torch.long, device=device))
        slot.append(torch.arange(len(keep), device=device))
    indices = torch.full((B, max_det), -1, dtype=torch.long, device=device)
    kept_scores = torch.zeros((B, max_det), device=device)
    kept_labels = torch.full((B, max_det), -1, dtype=torch.long, device=device)
    if kept:
        at, where = torch.cat(kept), (torch.cat(image_of), torch.cat(slot))
        indices[where], kept_scores[where], kept_labels[where] = anchor[at], score[at], label[at]
    return _detections(branch, output, indices, kept_scores, kept_labels, indices >= 0)
