"""Keypoint terms: OKS loss, visibility BCE, RLE on the float32 island with the RealNVP flow, the
OKS-aware assignment, unlabelled points, padding, empty images and capture safety."""

from __future__ import annotations

import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from lucid_models import make_anchors
from lucid_models.outputs import BranchOutput, ModelOutput
from lucid_train.assign import Assignment
from lucid_train.assign.candidates import candidates_in_boxes
from lucid_train.assign.padded_targets import PaddedTargets
from lucid_train.evaluation import UNIFORM_KPT_SIGMA
from lucid_train.losses.detection import BranchInputs, LossTerms
from lucid_train.losses.flow import RealNVP
from lucid_train.losses.pose import (
    COCO_RLE_WEIGHTS,
    PoseLoss,
    _rle_loss,
    keypoint_overlaps,
    keypoint_terms,
    level_gated_candidates,
    rle_keypoint_weights,
)
from lucid_train.losses.progloss import DualLoss

SIZE = 64
K = 5
NUM_CLASSES = 2


def _anchors() -> tuple[torch.Tensor, torch.Tensor]:
    return make_anchors(
        [(SIZE // 8, SIZE // 8), (SIZE // 16, SIZE // 16), (SIZE // 32, SIZE // 32)]
    )


def _padded(
    boxes: list[list[list[float]]], keypoints: list[torch.Tensor], capacity: int | None = None
) -> PaddedTargets:
    """Padded pose targets; ``keypoints[b]`` is ``(n_b, K, 3)`` pixels."""
    B = len(boxes)
    M = capacity or max(1, *(len(b) for b in boxes))
    out_boxes = torch.zeros(B, M, 4)
    out_kpts = torch.zeros(B, M, K, 3)
    mask = torch.zeros(B, M, dtype=torch.bool)
    for b, rows in enumerate(boxes):
        if rows:
            out_boxes[b, : len(rows)] = torch.tensor(rows)
            out_kpts[b, : len(rows)] = keypoints[b]
            mask[b, : len(rows)] = True
    labels = torch.zeros(B, M, dtype=torch.long)
    index = torch.where(mask, torch.arange(B * M).view(B, M), -1)
    return PaddedTargets(out_boxes, labels, mask, mask.sum(1), index, keypoints=out_kpts)


def _kpts_in(box: list[float], seed: int, visible: float = 2.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    lo, hi = torch.tensor(box[:2]), torch.tensor(box[2:])
    xy = lo + torch.rand(K, 2, generator=gen) * (hi - lo)
    return torch.cat((xy, torch.full((K, 1), visible)), -1)


# --- weights and sigmas ---------------------------------------------------------------------


def test_rle_weights_are_the_authors_for_coco_and_ones_otherwise() -> None:
    coco = rle_keypoint_weights(17)
    assert coco.tolist() == pytest.approx(list(COCO_RLE_WEIGHTS))
    assert coco[9] == pytest.approx(1.5) and coco[7] == pytest.approx(1.2)  # wrist, elbow
    assert rle_keypoint_weights(7).tolist() == [1.0] * 7


# --- the terms on a hand-made assignment ----------------------------------------------------


def _single_positive(
    offsets: torch.Tensor, target_kpts: torch.Tensor, box: list[float]
) -> BranchInputs:
    """One positive anchor (row 10, stride 8) assigned to one ground truth."""
    points, strides = _anchors()
    A = points.shape[0]
    raw = torch.zeros(1, A, K, 3)
    raw[0, 10, :, :2] = offsets
    raw[0, 10, :, 2] = 5.0
    fg = torch.zeros(1, A, dtype=torch.bool)
    fg[0, 10] = True
    scores = torch.zeros(1, A, NUM_CLASSES)
    scores[0, 10, 0] = 1.0
    index = torch.zeros(1, A, dtype=torch.long)
    assignment = Assignment(fg, index, torch.zeros(1, A, 4), index, scores, fg.float())
    branch = BranchOutput(
        boxes=torch.zeros(1, A, 4),
        logits=torch.zeros(1, A, NUM_CLASSES),
        keypoints=raw.requires_grad_(),
        keypoint_sigmas=torch.zeros(1, A, K, 2, requires_grad=True),
    )
    targets = _padded([[box]], [target_kpts[None]])
    return BranchInputs(branch, points, strides, targets, assignment, (SIZE, SIZE))


def _perfect_offsets(target: torch.Tensor) -> torch.Tensor:
    points, strides = _anchors()
    return target[:, :2] / strides[10] - points[10]  # (anchor + d) * stride = target


def test_oks_loss_is_zero_for_perfect_keypoints_and_grows_with_error() -> None:
    box = [8.0, 4.0, 40.0, 44.0]
    target = _kpts_in(box, seed=0)
    flow = RealNVP()
    perfect = keypoint_terms(
        _single_positive(_perfect_offsets(target), target, box), flow, capacity=4
    )
    assert perfect.names == ("pose", "kobj", "rle")
    assert perfect.items[0] == pytest.approx(0.0, abs=1e-7)
    off = keypoint_terms(
        _single_positive(_perfect_offsets(target) + 1.0, target, box), flow, capacity=4
    )
    assert off.items[0] > 0.5


def test_unlabelled_points_leave_pose_and_rle_but_count_as_kobj_negatives() -> None:
    box = [8.0, 4.0, 40.0, 44.0]
    target = _kpts_in(box, seed=1)
    target[2, 2] = 0.0  # v = 0
    moved = target.clone()
    moved[2, :2] += 30.0
    offsets = _perfect_offsets(target) + 0.3
    flow = RealNVP()
    a = keypoint_terms(_single_positive(offsets, target, box), flow, capacity=4)
    b = keypoint_terms(_single_positive(offsets, moved, box), flow, capacity=4)
    torch.testing.assert_close(a.items, b.items)
    # kobj: logits 5 everywhere, targets 1 except the unlabelled point.
    bce = (4 * math.log1p(math.exp(-5.0)) + (5.0 + math.log1p(math.exp(-5.0)))) / K
    assert float(a.items[1]) == pytest.approx(bce, rel=1e-5)


def test_rle_equals_the_authors_expression_through_the_island() -> None:
    torch.manual_seed(2)
    flow = RealNVP()
    pred, target = torch.randn(3, K, 2) * 2, torch.randn(3, K, 2) * 2
    raw_sigma = torch.randn(3, K, 2)
    labelled = torch.rand(3, K) > 0.3
    weights = torch.arange(1, K + 1).float()
    got = _rle_loss(pred, raw_sigma, target, labelled, weights, flow)

    sigma = raw_sigma.sigmoid()
    error = ((pred - target) / (sigma + 1e-9)).clamp(-100, 100)
    per = (sigma.log() + (2 * sigma).log() + error.abs()).sum(-1) - 2 * flow.log_prob(error)
    expected = (per * weights)[labelled].sum() / labelled.sum()
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-5)


def test_rle_stays_finite_beyond_65504_under_fp16_autocast() -> None:
    flow = RealNVP()
    pred = torch.full((2, K, 2), 1.0e6, requires_grad=True)  # residual / sigma far beyond fp16
    target = torch.zeros(2, K, 2)
    raw_sigma = torch.full((2, K, 2), -12.0, dtype=torch.float16, requires_grad=True)
    labelled = torch.ones(2, K, dtype=torch.bool)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = _rle_loss(pred, raw_sigma, target, labelled, torch.ones(K), flow)
    loss.backward()
    assert torch.isfinite(loss)
    assert pred.grad is not None and torch.isfinite(pred.grad).all()
    assert raw_sigma.grad is not None and torch.isfinite(raw_sigma.grad).all()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in flow.parameters())


# --- the pose assigner's overlap and gate ---------------------------------------------------


def test_keypoint_overlap_is_one_for_perfect_points_and_falls_back_to_box_overlap() -> None:
    box = [8.0, 4.0, 40.0, 44.0]
    with_points = _kpts_in(box, seed=3)
    without = _kpts_in(box, seed=4, visible=0.0)
    targets = _padded([[box, box]], [torch.stack((with_points, without))])
    pred = torch.stack((with_points[:, :2], with_points[:, :2] + 20.0))[None]  # (1, 2, K, 2)
    fallback = torch.full((1, 2, 2), 0.25)
    oks = keypoint_overlaps(pred, targets, torch.full((K,), UNIFORM_KPT_SIGMA), fallback)
    assert oks[0, 0, 0] == pytest.approx(1.0)
    assert oks[0, 0, 1] < 0.5
    assert oks[0, 1].tolist() == [0.25, 0.25]


def test_level_gate_keeps_levels_that_suit_the_box_and_never_empties_a_box() -> None:
    points, strides = make_anchors([(16, 16), (8, 8), (4, 4)])  # a 128 px canvas
    anchors_px = points * strides
    boxes = torch.tensor([[[4.0, 4.0, 124.0, 124.0], [60.0, 60.0, 70.0, 66.0]]])
    plain = candidates_in_boxes(anchors_px, boxes, 16.0)
    gated = level_gated_candidates(plain, boxes, strides)
    s = strides.view(-1)
    # side 120: 2 s <= 120 <= 12 s only for s = 16 and 32 (8 * 12 = 96 < 120)
    assert gated[0, 0][s == 8].sum() == 0 and gated[0, 0][s > 8].sum() > 0
    assert gated[0, 0].sum() < plain[0, 0].sum()
    assert gated[0, 1].sum() > 0  # a small box keeps the finest level (open below)


# --- the branch loss: padding, empty images, flow training, capture safety ------------------


BOXES_0 = [[6.0, 4.0, 40.0, 50.0], [30.0, 20.0, 60.0, 60.0]]


def _output(batch: int, seed: int) -> ModelOutput:
    gen = torch.Generator().manual_seed(seed)
    points, strides = _anchors()
    A = points.shape[0]

    def branch() -> BranchOutput:
        return BranchOutput(
            boxes=(torch.rand(batch, A, 4, generator=gen) * 2 + 0.5).requires_grad_(),
            logits=torch.randn(batch, A, NUM_CLASSES, generator=gen).requires_grad_(),
            keypoints=torch.randn(batch, A, K, 3, generator=gen).requires_grad_(),
            keypoint_sigmas=torch.randn(batch, A, K, 2, generator=gen).requires_grad_(),
        )

    return ModelOutput(branch(), branch(), points, strides)


def _dual(flow: RealNVP) -> DualLoss:
    return DualLoss(PoseLoss(NUM_CLASSES, flow), PoseLoss(NUM_CLASSES, flow, one_to_one=True))


def _targets(capacity: int | None = None) -> PaddedTargets:
    kpts0 = torch.stack([_kpts_in(b, seed=i) for i, b in enumerate(BOXES_0)])
    kpts0[0, 1, 2] = 0.0
    kpts1 = _kpts_in([10.0, 10.0, 50.0, 40.0], seed=9)[None]
    return _padded([BOXES_0, [[10.0, 10.0, 50.0, 40.0]]], [kpts0, kpts1], capacity)


def _terms(targets: PaddedTargets, output: ModelOutput, flow: RealNVP) -> LossTerms:
    return _dual(flow)(output, targets, torch.tensor(0.8), (SIZE, SIZE))


def test_padding_rows_change_nothing() -> None:
    torch.manual_seed(5)
    flow, output = RealNVP(), _output(2, seed=5)
    tight = _terms(_targets(), output, flow)
    padded = _terms(_targets(capacity=6), output, flow)
    # Slots scale with the capacity, but every sum over them runs by position: bit for bit.
    assert torch.equal(padded.total, tight.total)
    assert torch.equal(padded.items, tight.items)
    assert tight.names == tuple(f"o2o_{n}" for n in ("box", "cls", "l1", "pose", "kobj", "rle"))


def test_an_empty_image_adds_nothing_to_the_keypoint_terms() -> None:
    torch.manual_seed(6)
    flow, output = RealNVP(), _output(2, seed=6)
    kpts0 = torch.stack([_kpts_in(b, seed=i) for i, b in enumerate(BOXES_0)])
    loss = PoseLoss(NUM_CLASSES, flow)
    assert output.one2many is not None
    both = loss(output.one2many, output, _padded([BOXES_0, []], [kpts0, kpts0[:0]]), (SIZE, SIZE))
    first = BranchOutput(
        boxes=output.one2many.boxes[:1],
        logits=output.one2many.logits[:1],
        keypoints=output.one2many.keypoints[:1] if output.one2many.keypoints is not None else None,
        keypoint_sigmas=(
            output.one2many.keypoint_sigmas[:1]
            if output.one2many.keypoint_sigmas is not None
            else None
        ),
    )
    alone = ModelOutput(first, first, output.anchor_points, output.anchor_strides)
    single = loss(first, alone, _padded([BOXES_0], [kpts0]), (SIZE, SIZE))
    for name in ("pose", "kobj", "rle"):
        i = both.terms.names.index(name)
        torch.testing.assert_close(both.terms.items[i], single.terms.items[i], atol=1e-6, rtol=1e-6)


def test_the_flow_trains_through_the_loss_and_keypoints_get_gradients() -> None:
    torch.manual_seed(7)
    flow, output = RealNVP(), _output(2, seed=7)
    _terms(_targets(), output, flow).total.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in flow.parameters())
    assert any(float(p.grad.abs().sum()) > 0 for p in flow.parameters() if p.grad is not None)
    assert output.one2many is not None and output.one2many.keypoints is not None
    grad = output.one2many.keypoints.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_runs_under_fake_tensors_so_it_has_no_data_dependent_ops() -> None:
    flow = RealNVP()
    with FakeTensorMode(allow_non_fake_inputs=True):
        output = _output(2, seed=8)
        terms = _terms(_targets(capacity=4), output, flow)
        terms.total.backward()
    assert terms.items.shape == (6,)
