"""Oriented-box terms: ProbIoU (Hellinger), the rotated distance encoding, the angle loss and its
aspect weight, the target preparation (angle range, tiny boxes), padding and capture safety."""

from __future__ import annotations

import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from lucid_models import make_anchors
from lucid_models.decode import decode_rotated
from lucid_models.outputs import BranchOutput, ModelOutput
from lucid_train.assign import Assignment
from lucid_train.assign.padded_targets import PaddedTargets
from lucid_train.losses.detection import BranchInputs, LossTerms
from lucid_train.losses.obb import (
    OrientedLoss,
    RotatedGains,
    angle_loss,
    rotated_box_terms,
    rotated_targets,
)
from lucid_train.losses.progloss import DualLoss
from lucid_train.losses.rotated_iou import (
    encode_rotated,
    probiou,
    rotated_overlaps,
    to_training_angle_range,
)

SIZE = 64
NUM_CLASSES = 2


def _rotate_about_origin(boxes: torch.Tensor, phi: float) -> torch.Tensor:
    c, s = math.cos(phi), math.sin(phi)
    x, y = boxes[..., 0], boxes[..., 1]
    return torch.stack(
        (c * x - s * y, s * x + c * y, boxes[..., 2], boxes[..., 3], boxes[..., 4] + phi), -1
    )


# --- ProbIoU -------------------------------------------------------------------------------


def test_probiou_of_identical_boxes_is_one_up_to_the_authors_eps() -> None:
    box = torch.tensor([[10.0, 20.0, 30.0, 8.0, 0.4], [0.0, 0.0, 1.0, 1.0, -1.0]])
    # B is clamped at eps, so 1 - sqrt(1 - exp(-eps) + eps) ~ 1 - sqrt(2 eps).
    expected = 1 - math.sqrt(-math.expm1(-1e-7) + 1e-7)
    exact = probiou(box.double(), box.double())
    torch.testing.assert_close(exact, torch.full((2,), expected, dtype=torch.float64))
    torch.testing.assert_close(probiou(box, box), torch.ones(2), atol=5e-4, rtol=0)


def test_probiou_is_symmetric_and_invariant_to_a_rigid_rotation() -> None:
    torch.manual_seed(0)
    a = torch.cat((torch.rand(20, 2) * 10, torch.rand(20, 2) * 6 + 1, torch.rand(20, 1) * 3), 1)
    b = a + torch.randn(20, 5) * 0.7
    b[:, 2:4] = b[:, 2:4].abs() + 0.5
    torch.testing.assert_close(probiou(a, b), probiou(b, a))
    rotated = probiou(_rotate_about_origin(a, 0.9), _rotate_about_origin(b, 0.9))
    torch.testing.assert_close(rotated, probiou(a, b), atol=1e-5, rtol=0)


def test_probiou_ignores_the_angle_of_squares_and_half_turns() -> None:
    square = torch.tensor([5.0, 5.0, 4.0, 4.0, 0.0])
    other = torch.tensor([6.0, 5.5, 3.0, 3.0, 0.0])
    turned = square.clone()
    turned[4] = 1.1
    torch.testing.assert_close(probiou(turned, other), probiou(square, other))
    bar = torch.tensor([5.0, 5.0, 8.0, 2.0, 0.3])
    half_turn = bar.clone()
    half_turn[4] += math.pi
    torch.testing.assert_close(probiou(half_turn, other), probiou(bar, other), atol=1e-6, rtol=0)


def test_probiou_drops_with_rotation_of_an_elongated_box_and_far_boxes_score_zero() -> None:
    bar = torch.tensor([0.0, 0.0, 10.0, 2.0, 0.0])
    quarter = torch.tensor([0.0, 0.0, 10.0, 2.0, math.pi / 2])
    assert float(probiou(bar, quarter)) < 0.5
    far = torch.tensor([1000.0, 0.0, 10.0, 2.0, 0.0])
    assert float(probiou(bar, far)) < 1e-6


def test_probiou_keeps_float64_and_computes_in_float32_under_autocast() -> None:
    a = torch.tensor([[1.0, 2.0, 3.0, 4.0, 0.1]], dtype=torch.float64)
    assert probiou(a, a).dtype == torch.float64
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = probiou(a.float().bfloat16(), a.float().bfloat16())
    assert out.dtype == torch.float32


def test_rotated_overlaps_is_pairwise_and_non_negative() -> None:
    gt = torch.tensor([[[10.0, 10.0, 8.0, 4.0, 0.2], [30.0, 30.0, 6.0, 6.0, 0.0]]])
    pred = torch.tensor(
        [[[10.0, 10.0, 8.0, 4.0, 0.2], [50.0, 5.0, 2.0, 2.0, 1.0], [30, 31, 6, 5, 0]]]
    )
    out = rotated_overlaps(gt, pred)
    assert out.shape == (1, 2, 3)
    assert (out >= 0).all()
    assert out[0, 0, 0] > 0.99 and out[0, 1, 2] > 0.5 and out[0, 0, 1] < 1e-3


# --- encoding and angle range ---------------------------------------------------------------


def test_encode_rotated_inverts_the_models_decode() -> None:
    torch.manual_seed(1)
    points, _ = make_anchors([(4, 4)], (8,))
    distances = torch.rand(2, points.shape[0], 4) * 3 + 0.1
    angles = torch.randn(2, points.shape[0])
    boxes = decode_rotated(distances, angles, points, torch.ones(points.shape[0], 1))
    torch.testing.assert_close(encode_rotated(boxes, points), distances, atol=1e-5, rtol=0)


def test_training_angle_range_moves_only_the_lower_quarter_by_a_half_turn() -> None:
    angles = torch.tensor([-math.pi / 2, -1.0, -math.pi / 4, 0.0, 1.5])
    boxes = torch.cat((torch.ones(5, 4), angles[:, None]), 1)
    out = to_training_angle_range(boxes)
    expected = torch.tensor([math.pi / 2, math.pi - 1.0, -math.pi / 4, 0.0, 1.5])
    torch.testing.assert_close(out[:, 4], expected)
    assert (out[:, 4] >= -math.pi / 4).all() and (out[:, 4] < 3 * math.pi / 4).all()
    torch.testing.assert_close(to_training_angle_range(out), out)  # idempotent
    torch.testing.assert_close(probiou(out, boxes), probiou(boxes, boxes))  # same rectangles


def _padded(rboxes: list[list[list[float]]], capacity: int | None = None) -> PaddedTargets:
    """Padded obb targets (envelope boxes unused by the rotated terms)."""
    B = len(rboxes)
    M = capacity or max(1, *(len(r) for r in rboxes))
    out = torch.zeros(B, M, 5)
    mask = torch.zeros(B, M, dtype=torch.bool)
    for b, rows in enumerate(rboxes):
        if rows:
            out[b, : len(rows)] = torch.tensor(rows)
            mask[b, : len(rows)] = True
    envelope = torch.cat((out[..., :2] - out[..., 2:4] / 2, out[..., :2] + out[..., 2:4] / 2), -1)
    labels = torch.arange(M).remainder(NUM_CLASSES).expand(B, M) * mask
    index = torch.where(mask, torch.arange(B * M).view(B, M), -1)
    return PaddedTargets(envelope, labels, mask, mask.sum(1), index, rboxes=out)


def test_rotated_targets_mask_sides_under_two_pixels_and_convert_angles() -> None:
    targets = _padded([[[10, 10, 8, 1.5, 0.0], [20, 20, 8, 4, -1.2], [5, 5, 2.0, 2.0, 0.0]]])
    out = rotated_targets(targets)
    assert out.mask.tolist() == [[False, True, True]]
    assert out.counts.tolist() == [2]
    assert out.rboxes is not None
    assert float(out.rboxes[0, 1, 4]) == pytest.approx(math.pi - 1.2)
    assert out.rboxes.shape == targets.rboxes.shape  # type: ignore[union-attr]


# --- angle loss -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "weight"), [(1, 1.0), (2, 0.948), (5, 0.750), (10, 0.555), (20, 0.369)]
)
def test_angle_loss_weight_falls_with_aspect_ratio(ratio: float, weight: float) -> None:
    target = torch.tensor([[[0.0, 0.0, 2.0 * ratio, 2.0, 0.3]]])
    pred = torch.tensor([[0.3 + math.pi / 4]])  # sin^2(2 * pi / 4) = 1
    one = torch.ones(1, 1)
    loss = angle_loss(pred, target, one.bool(), one, torch.tensor(1.0))
    assert float(loss) == pytest.approx(weight, abs=1e-3)


def test_angle_loss_is_zero_for_equal_or_half_turned_angles_and_skips_background() -> None:
    target = torch.tensor([[[0.0, 0.0, 6.0, 2.0, 0.3]] * 3])
    pred = torch.tensor([[0.3, 0.3 + math.pi, 1.0]])
    fg = torch.tensor([[True, True, False]])
    loss = angle_loss(pred, target, fg, torch.ones(1, 3), torch.tensor(1.0))
    assert float(loss) == pytest.approx(0.0, abs=1e-10)


# --- the rotated terms ----------------------------------------------------------------------


def _perfect_case() -> tuple[BranchOutput, torch.Tensor, torch.Tensor, Assignment, PaddedTargets]:
    points, strides = make_anchors([(8, 8), (4, 4), (2, 2)])
    A = points.shape[0]
    distances = torch.rand(1, A, 4) * 2 + 0.5
    angles = torch.rand(1, A) * 1.5
    target_px = decode_rotated(distances, angles, points, strides)  # (1, A, 5) pixels
    fg = torch.zeros(1, A, dtype=torch.bool)
    fg[0, [3, 20, 70]] = True
    rboxes = target_px[:, [3, 20, 70]]
    targets = PaddedTargets(
        torch.zeros(1, 3, 4),
        torch.zeros(1, 3, dtype=torch.long),
        torch.ones(1, 3, dtype=torch.bool),
        torch.tensor([3]),
        torch.arange(3)[None],
        rboxes=rboxes,
    )
    index = torch.zeros(1, A, dtype=torch.long)
    index[0, [3, 20, 70]] = torch.tensor([0, 1, 2])
    scores = torch.zeros(1, A, NUM_CLASSES)
    scores[0, [3, 20, 70], 0] = 0.8
    assignment = Assignment(fg, index, target_px * fg[..., None], index * 0, scores, fg.float())
    branch = BranchOutput(boxes=distances, logits=torch.zeros(1, A, NUM_CLASSES), angles=angles)
    return branch, points, strides, assignment, targets


def test_perfect_rotated_prediction_costs_nothing_but_the_probiou_eps() -> None:
    torch.manual_seed(2)
    branch, points, strides, assignment, targets = _perfect_case()
    terms = rotated_box_terms(
        BranchInputs(branch, points, strides, targets, assignment, (SIZE, SIZE))
    )
    box, l1, angle = terms.items.tolist()
    assert terms.names == ("box", "l1", "angle")
    assert 0.0 < box < 7.5 * 5e-4  # only the eps floor of 1 - ProbIoU
    assert l1 == pytest.approx(0.0, abs=1e-6)
    assert angle == pytest.approx(0.0, abs=1e-6)


def test_rotated_terms_are_weighted_and_scaled_by_their_gains() -> None:
    torch.manual_seed(3)
    branch, points, strides, assignment, targets = _perfect_case()
    assert branch.angles is not None
    branch.angles = branch.angles + 0.4
    base = rotated_box_terms(
        BranchInputs(branch, points, strides, targets, assignment, (SIZE, SIZE))
    )
    gains = RotatedGains(box=15.0, l1=3.0, angle=2.0)
    inputs = BranchInputs(branch, points, strides, targets, assignment, (SIZE, SIZE))
    double = rotated_box_terms(inputs, gains=gains)
    torch.testing.assert_close(double.items, 2 * base.items)
    assert (base.items > 0).all()


# --- the branch loss: padding, empty images, capture safety ---------------------------------


def _output(batch: int, seed: int) -> ModelOutput:
    gen = torch.Generator().manual_seed(seed)
    points, strides = make_anchors([(8, 8), (4, 4), (2, 2)])
    A = points.shape[0]

    def branch() -> BranchOutput:
        return BranchOutput(
            boxes=(torch.rand(batch, A, 4, generator=gen) * 2 + 0.3).requires_grad_(),
            logits=torch.randn(batch, A, NUM_CLASSES, generator=gen).requires_grad_(),
            angles=(torch.randn(batch, A, generator=gen) * 0.5).requires_grad_(),
        )

    return ModelOutput(
        one2one=branch(), one2many=branch(), anchor_points=points, anchor_strides=strides
    )


IMAGE_0 = [[20.0, 24.0, 30.0, 12.0, 0.3], [44.0, 40.0, 16.0, 10.0, -1.3], [8, 8, 1.0, 6.0, 0.0]]


def _dual_terms(targets: PaddedTargets, output: ModelOutput) -> LossTerms:
    loss = DualLoss(OrientedLoss(NUM_CLASSES), OrientedLoss(NUM_CLASSES, one_to_one=True))
    return loss(output, targets, torch.tensor(0.8), (SIZE, SIZE))


def test_padding_rows_change_nothing() -> None:
    output = _output(2, seed=4)
    tight = _dual_terms(_padded([IMAGE_0, [[30, 30, 20, 8, 0.7]]]), output)
    padded = _dual_terms(_padded([IMAGE_0, [[30, 30, 20, 8, 0.7]]], capacity=7), output)
    torch.testing.assert_close(padded.total, tight.total, atol=1e-6, rtol=0)
    torch.testing.assert_close(padded.items, tight.items, atol=1e-6, rtol=0)
    assert tight.names == ("o2o_box", "o2o_cls", "o2o_l1", "o2o_angle")


def test_an_empty_image_adds_nothing_to_the_rotated_terms() -> None:
    output = _output(2, seed=5)
    targets = _padded([IMAGE_0, []])
    loss = OrientedLoss(NUM_CLASSES)
    assert output.one2many is not None
    with_empty = loss(output.one2many, output, targets, (SIZE, SIZE))
    many = output.one2many
    first = BranchOutput(
        boxes=many.boxes[:1],
        logits=many.logits[:1],
        angles=None if many.angles is None else many.angles[:1],
    )
    alone = ModelOutput(first, first, output.anchor_points, output.anchor_strides)
    single = loss(first, alone, _padded([IMAGE_0]), (SIZE, SIZE))
    names = with_empty.terms.names
    for name in ("box", "l1", "angle"):
        i = names.index(name)
        torch.testing.assert_close(
            with_empty.terms.items[i], single.terms.items[i], atol=1e-6, rtol=0
        )


def test_gradients_reach_distances_and_angles_and_stay_finite() -> None:
    output = _output(2, seed=6)
    terms = _dual_terms(_padded([IMAGE_0, [[30, 30, 20, 8, 0.7]]]), output)
    terms.total.backward()
    assert output.one2many is not None and output.one2many.angles is not None
    for grad in (output.one2many.boxes.grad, output.one2many.angles.grad):
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_runs_under_fake_tensors_so_it_has_no_data_dependent_ops() -> None:
    with FakeTensorMode():
        output = _output(2, seed=7)
        targets = _padded([IMAGE_0, []], capacity=4)
        terms = _dual_terms(targets, output)
        terms.total.backward()
    assert terms.items.shape == (4,)
