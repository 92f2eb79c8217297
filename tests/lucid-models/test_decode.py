"""Decode paths on planted head outputs: the right boxes, masks, keypoints and angles come out."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from lucid_models import (
    BranchOutput,
    ModelOutput,
    decode_boxes,
    decode_masks,
    decode_rotated,
    make_anchors,
    nms_decode,
    topk_decode,
)

# A 64x64 canvas: levels 8x8, 4x4, 2x2 -> 84 anchors.
SIZES = [(8, 8), (4, 4), (2, 2)]
A = 84
C = 3
K = 2
LOW = -20.0  # a logit no planted detection is near


def _anchor(level: int, y: int, x: int) -> int:
    offset = sum(h * w for h, w in SIZES[:level])
    return offset + y * SIZES[level][1] + x


def _branch(**extras: Tensor) -> BranchOutput:
    return BranchOutput(boxes=torch.ones(1, A, 4), logits=torch.full((1, A, C), LOW), **extras)


def _output(one2one: BranchOutput, one2many: BranchOutput | None = None) -> ModelOutput:
    points, strides = make_anchors(SIZES)
    return ModelOutput(one2one, one2many, points, strides)


# Planted: anchor P (level 0, cell y=2, x=3, stride 8) is class 2 at logit 4;
# anchor Q (level 1, cell y=1, x=0, stride 16) is class 0 at logit 2.
P, Q = _anchor(0, 2, 3), _anchor(1, 1, 0)


def _planted(**extras: Tensor) -> BranchOutput:
    branch = _branch(**extras)
    branch.logits[0, P, 2] = 4.0
    branch.logits[0, Q, 0] = 2.0
    branch.boxes[0, P] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    branch.boxes[0, Q] = torch.tensor([0.5, 0.5, 0.5, 0.5])
    return branch


def test_topk_returns_planted_boxes_labels_and_indices_in_score_order() -> None:
    """P (cell centre (3.5, 2.5) at stride 8, ltrb 1,2,3,4) and Q come out first, in order."""
    det = topk_decode(_output(_planted()), max_det=5, score_threshold=0.01)
    assert det.anchor_indices.tolist() == [[P, Q, -1, -1, -1]]
    assert det.labels.tolist() == [[2, 0, -1, -1, -1]]
    torch.testing.assert_close(det.scores[0, :2], torch.tensor([4.0, 2.0]).sigmoid())
    assert det.scores[0, 2:].eq(0).all()
    # P: x1 = (3.5 - 1) * 8, y1 = (2.5 - 2) * 8, x2 = (3.5 + 3) * 8, y2 = (2.5 + 4) * 8
    torch.testing.assert_close(det.boxes[0, 0], torch.tensor([20.0, 4.0, 52.0, 52.0]))
    # Q: centre (0.5, 1.5) at stride 16, half-size 0.5 -> (0, 16, 16, 32)
    torch.testing.assert_close(det.boxes[0, 1], torch.tensor([0.0, 16.0, 16.0, 32.0]))
    assert det.boxes[0, 2:].eq(0).all()


def test_topk_without_threshold_fills_every_row_and_pads_past_the_anchor_count() -> None:
    """With no floor all A anchors are rows; asking for more than A pads with -1."""
    det = topk_decode(_output(_planted()), max_det=A + 6)
    assert det.scores.shape == (1, A + 6)
    assert (det.anchor_indices[0, :A] >= 0).all()
    assert det.anchor_indices[0, A:].eq(-1).all()
    assert det.labels[0, A:].eq(-1).all()
    assert sorted(det.anchor_indices[0, :A].tolist()) == list(range(A))


def test_mask_coefficients_are_gathered_by_the_box_indices_and_masks_assemble() -> None:
    """P's coefficients pick the left-half prototype, cropped to P's box; padding is empty."""
    coefs = torch.zeros(1, A, 2)
    coefs[0, P] = torch.tensor([1.0, 0.0])
    coefs[0, Q] = torch.tensor([0.0, 1.0])
    protos = torch.full((1, 2, 16, 16), -10.0)
    protos[0, 0, :, :8] = 10.0  # left half of the canvas
    protos[0, 1, :8, :] = 10.0  # top half
    out = _output(_planted(mask_coefficients=coefs))
    det = topk_decode(out, max_det=3, score_threshold=0.01)
    assert det.mask_coefficients is not None
    torch.testing.assert_close(det.mask_coefficients[0, :2], coefs[0, [P, Q]])
    masks = decode_masks(det, protos, (64, 64))
    assert masks.shape == (1, 3, 64, 64)
    assert masks.dtype == torch.bool
    expected_p = torch.zeros(64, 64, dtype=torch.bool)
    expected_p[4:52, 20:32] = True  # box x 20..52, y 4..52, and the left half x < 32
    assert torch.equal(masks[0, 0], expected_p)
    expected_q = torch.zeros(64, 64, dtype=torch.bool)
    expected_q[16:32, 0:16] = True  # Q's box lies inside the top half
    assert torch.equal(masks[0, 1], expected_q)
    assert not masks[0, 2].any()


def test_keypoints_decode_from_their_own_anchor_and_stride() -> None:
    """Point = (anchor + offset) * stride; visibility is the sigmoid of its logit."""
    raw = torch.zeros(1, A, K, 3)
    raw[0, P] = torch.tensor([[1.0, -1.0, 0.0], [0.0, 0.5, 3.0]])
    raw[0, Q] = torch.tensor([[-0.5, 0.0, -3.0], [2.0, 2.0, 0.0]])
    det = topk_decode(_output(_planted(keypoints=raw)), max_det=3, score_threshold=0.01)
    assert det.keypoints is not None
    expected_p = torch.tensor([[(3.5 + 1) * 8, (2.5 - 1) * 8, 0.5], [3.5 * 8, 3.0 * 8, 0.0]])
    expected_p[1, 2] = torch.tensor(3.0).sigmoid()
    torch.testing.assert_close(det.keypoints[0, 0], expected_p)
    expected_q = torch.tensor([[0.0, 1.5 * 16, 0.0], [2.5 * 16, 3.5 * 16, 0.5]])
    expected_q[0, 2] = torch.tensor(-3.0).sigmoid()
    torch.testing.assert_close(det.keypoints[0, 1], expected_q)
    assert det.keypoints[0, 2].eq(0).all()


def test_rotated_topk_gathers_each_angle_with_its_own_box() -> None:
    """Angles come from the same anchors as the boxes; the centre moves along the rotation."""
    angles = torch.zeros(1, A)
    angles[0, P] = 0.3
    angles[0, Q] = -math.pi / 2
    det = topk_decode(_output(_planted(angles=angles)), max_det=3, score_threshold=0.01)
    assert det.rotated is not None
    torch.testing.assert_close(det.rotated[0, :2, 4], torch.tensor([0.3, -math.pi / 2]))
    # P: ltrb (1,2,3,4): size (4, 6) * 8; centre offset ((3-1)/2, (4-2)/2) = (1, 1) rotated by 0.3.
    c, s = math.cos(0.3), math.sin(0.3)
    centre = [(3.5 + c - s) * 8, (2.5 + s + c) * 8]
    torch.testing.assert_close(det.rotated[0, 0, :4], torch.tensor([*centre, 32.0, 48.0]))
    # Q: symmetric distances, so the centre is the anchor whatever the angle.
    torch.testing.assert_close(det.rotated[0, 1, :4], torch.tensor([8.0, 24.0, 16.0, 16.0]))
    assert det.rotated[0, 2].eq(0).all()


def test_rotated_decode_at_angle_zero_is_the_axis_aligned_decode() -> None:
    """With angle 0 the rotated box is the xyxy box in centre/size form."""
    g = torch.Generator().manual_seed(0)
    dist = torch.rand(2, A, 4, generator=g) * 3
    points, strides = make_anchors(SIZES)
    xyxy = decode_boxes(dist, points, strides)
    rot = decode_rotated(dist, torch.zeros(2, A), points, strides)
    torch.testing.assert_close(rot[..., :2], (xyxy[..., :2] + xyxy[..., 2:]) / 2)
    torch.testing.assert_close(rot[..., 2:4], xyxy[..., 2:] - xyxy[..., :2])


def test_nms_path_reads_one2many_and_suppresses_same_class_overlaps_only() -> None:
    """Of two overlapping class-2 boxes only the higher survives; a class-1 twin is kept."""
    o2m = _branch()
    a, b, c = _anchor(0, 4, 4), _anchor(0, 4, 5), _anchor(0, 0, 0)
    for anchor, cls, logit in ((a, 2, 3.0), (b, 2, 2.0), (c, 1, 1.0)):
        o2m.logits[0, anchor, cls] = logit
        o2m.boxes[0, anchor] = torch.tensor([2.0, 2.0, 2.0, 2.0])
    o2m.logits[0, a, 1] = 2.5  # a's best class stays 2 (one label per anchor)
    # a and b overlap at IoU 0.6. A class-1 box on b's footprint, planted at anchor d below b:
    d = _anchor(0, 5, 5)
    o2m.logits[0, d, 1] = 1.5
    o2m.boxes[0, d] = torch.tensor([2.0, 3.0, 2.0, 1.0])  # same box as b, seen from below
    o2o = _branch()  # the one-to-one branch must not be read
    o2o.logits.fill_(10.0)
    det = nms_decode(_output(o2o, o2m), max_det=4, score_threshold=0.01, iou_threshold=0.5)
    assert det.anchor_indices.tolist() == [[a, d, c, -1]]
    assert det.labels.tolist() == [[2, 1, 1, -1]]


def test_the_nms_path_of_rotated_boxes_suppresses_by_their_probiou_not_their_envelopes() -> None:
    """Two thin boxes crossed at right angles share one axis-aligned envelope (box IoU 1) and
    barely overlap as rotated boxes: both are kept; the same box twice keeps one."""
    o2m = _branch(angles=torch.zeros(1, A))
    a, b, c = _anchor(0, 4, 4), _anchor(0, 4, 5), _anchor(0, 0, 0)
    for anchor, logit in ((a, 3.0), (b, 2.0), (c, 1.0)):
        o2m.logits[0, anchor, 2] = logit
    o2m.boxes[0, a] = torch.tensor([3.0, 0.25, 3.0, 0.25])  # 48 x 4 px about a's centre
    o2m.angles[0, a] = math.pi / 4  # type: ignore[index]
    h = math.sqrt(0.5)  # b's centre one cell left along its own axes: a's centre
    o2m.boxes[0, b] = torch.tensor([3.0 + h, 0.25 + h, 3.0 - h, 0.25 - h])
    o2m.angles[0, b] = -math.pi / 4  # type: ignore[index]
    o2m.boxes[0, c] = torch.tensor([1.0, 1.0, 1.0, 1.0])
    det = nms_decode(_output(_branch(), o2m), max_det=4, score_threshold=0.01, iou_threshold=0.7)
    assert det.anchor_indices.tolist() == [[a, b, c, -1]]
    assert det.rotated is not None
    torch.testing.assert_close(det.rotated[0, 0, :2], det.rotated[0, 1, :2])
    o2m.angles[0, b] = math.pi / 4  # type: ignore[index]
    o2m.boxes[0, b] = torch.tensor([3.0 + h, 0.25 - h, 3.0 - h, 0.25 + h])  # a's box exactly
    det = nms_decode(_output(_branch(), o2m), max_det=4, score_threshold=0.01, iou_threshold=0.7)
    assert det.anchor_indices.tolist() == [[a, c, -1, -1]]


def test_nms_path_refuses_a_deploy_output() -> None:
    """A deploy view has no one-to-many branch, which the NMS path needs."""
    with pytest.raises(ValueError, match="one-to-many"):
        nms_decode(_output(_planted()))


def test_multi_label_topk_ranks_anchor_class_pairs_among_the_best_anchors() -> None:
    """P's second class (logit 3) outranks Q's best (2): with ``multi_label`` it is a row of its
    own, between P's best and Q; without, each anchor gives one row."""
    branch = _planted()
    branch.logits[0, P, 1] = 3.0
    single = topk_decode(_output(branch), max_det=3, score_threshold=0.01)
    multi = topk_decode(_output(branch), max_det=3, score_threshold=0.01, multi_label=True)
    assert single.anchor_indices.tolist() == [[P, Q, -1]]
    assert multi.anchor_indices.tolist() == [[P, P, Q]]
    assert multi.labels.tolist() == [[2, 1, 0]]
    torch.testing.assert_close(multi.scores[0], torch.tensor([4.0, 3.0, 2.0]).sigmoid())
    torch.testing.assert_close(multi.boxes[0, 1], multi.boxes[0, 0])  # one anchor, one box


def test_multi_label_nms_keeps_a_second_class_of_one_anchor_and_suppresses_within_a_class() -> None:
    """Anchor a scores class 2 and class 1: both rows survive (classes never suppress each
    other); b's class 2 overlaps a's and goes, as without ``multi_label``."""
    o2m = _branch()
    a, b = _anchor(0, 4, 4), _anchor(0, 4, 5)
    for anchor, cls, logit in ((a, 2, 3.0), (a, 1, 2.5), (b, 2, 2.0)):
        o2m.logits[0, anchor, cls] = logit
    o2m.boxes[0, a] = torch.tensor([2.0, 2.0, 2.0, 2.0])
    o2m.boxes[0, b] = torch.tensor([2.0, 2.0, 2.0, 2.0])
    out = _output(_branch(), o2m)
    single = nms_decode(out, max_det=4, score_threshold=0.01, iou_threshold=0.5)
    multi = nms_decode(out, max_det=4, score_threshold=0.01, iou_threshold=0.5, multi_label=True)
    assert single.anchor_indices.tolist() == [[a, -1, -1, -1]]
    assert multi.anchor_indices.tolist() == [[a, a, -1, -1]]
    assert multi.labels.tolist() == [[2, 1, -1, -1]]
    torch.testing.assert_close(multi.scores[0, :2], torch.tensor([3.0, 2.5]).sigmoid())
