"""The detection loss: CIoU values, the L1 and BCE terms, the shared normaliser, the ProgLoss
blend, padding invariance, gradient routing and the no-host-sync (capture) contract."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)
from torch.utils._python_dispatch import TorchDispatchMode

from lucid_models import BranchOutput, ModelOutput, build_model, make_anchors
from lucid_train.assign import Assignment, box_ciou
from lucid_train.losses import (
    BranchInputs,
    BranchResult,
    DetectionLoss,
    DualLoss,
    LossTerms,
    PaddedTargets,
    o2m_weight,
)

SIZE = 64
NUM_CLASSES = 3


def _output(batch: int = 2, seed: int = 0, requires_grad: bool = False) -> ModelOutput:
    """A random training output on a 64 px canvas (84 anchors at strides 8, 16, 32)."""
    g = torch.Generator().manual_seed(seed)
    points, strides = make_anchors([(SIZE // s, SIZE // s) for s in (8, 16, 32)])
    num = points.shape[0]

    def branch() -> BranchOutput:
        boxes = (torch.rand(batch, num, 4, generator=g) * 2.5 + 0.5).requires_grad_(requires_grad)
        logits = (torch.randn(batch, num, NUM_CLASSES, generator=g) - 2).requires_grad_(
            requires_grad
        )
        return BranchOutput(boxes=boxes, logits=logits)

    return ModelOutput(
        one2one=branch(), one2many=branch(), anchor_points=points, anchor_strides=strides
    )


def _targets(capacity: int = 3) -> PaddedTargets:
    """Image 0: two objects, image 1: one; padded to ``capacity`` with garbage padding boxes."""
    real = [
        [([4.0, 6.0, 30.0, 40.0], 0), ([34.0, 20.0, 60.0, 58.0], 2)],
        [([10.0, 10.0, 50.0, 30.0], 1)],
    ]
    boxes = torch.full((2, capacity, 4), 7.0)  # padding content must not matter
    labels = torch.full((2, capacity), 2, dtype=torch.int64)
    mask = torch.zeros(2, capacity, dtype=torch.bool)
    index = torch.full((2, capacity), -1, dtype=torch.int64)
    flat = 0
    for i, rows in enumerate(real):
        for j, (box, label) in enumerate(rows):
            boxes[i, j], labels[i, j] = torch.tensor(box), label
            mask[i, j], index[i, j] = True, flat
            flat += 1
    return PaddedTargets(boxes, labels, mask, mask.sum(1), index)


def test_ciou_matches_hand_computed_values() -> None:
    # Equal aspect: IoU 1/7, centre distance^2 2, enclosing diagonal^2 18, no aspect term.
    a, b = torch.tensor([0.0, 0.0, 2.0, 2.0]), torch.tensor([1.0, 1.0, 3.0, 3.0])
    torch.testing.assert_close(box_ciou(a, b), torch.tensor(1 / 7 - 2 / 18), atol=1e-6, rtol=0)
    # Aspect 2:1 vs 1:1: IoU 0.5, rho^2 1, c^2 20, v = 4/pi^2 (atan 1 - atan 2)^2.
    a, b = torch.tensor([0.0, 0.0, 4.0, 2.0]), torch.tensor([0.0, 0.0, 2.0, 2.0])
    v = 4 / math.pi**2 * (math.atan(1.0) - math.atan(2.0)) ** 2
    expected = 0.5 - 1 / 20 - v * v / (1 - 0.5 + v)
    torch.testing.assert_close(box_ciou(a, b), torch.tensor(expected), atol=1e-6, rtol=0)
    torch.testing.assert_close(box_ciou(b, a), box_ciou(a, b))
    torch.testing.assert_close(box_ciou(a, a), torch.tensor(1.0), atol=1e-6, rtol=0)
    # Disjoint boxes go negative (the assigner clamps; the loss does not).
    assert float(box_ciou(torch.tensor([0.0, 0.0, 1, 1]), torch.tensor([5.0, 5, 6, 6]))) < 0


def test_branch_terms_are_gained_ciou_bce_and_image_normalised_l1() -> None:
    # One positive anchor, weight 0.5: every term is checkable by hand.
    out = _output(batch=1)
    branch = out.one2many
    assert branch is not None
    num = out.anchor_points.shape[0]
    anchor = 70  # stride 16, cell (x 2, y 1): anchors 0-63 are stride 8, 64-79 stride 16
    point, stride = out.anchor_points[anchor], float(out.anchor_strides[anchor])
    target = torch.cat((point - 1.0, point + torch.tensor([2.0, 1.5]))) * stride  # xyxy px
    fg = torch.zeros(1, num, dtype=torch.bool)
    fg[0, anchor] = True
    scores = torch.zeros(1, num, NUM_CLASSES)
    scores[0, anchor, 1] = 0.5
    assignment = Assignment(
        fg=fg,
        target_index=torch.zeros(1, num, dtype=torch.int64),
        target_boxes=torch.where(fg[..., None], target, 0.0),
        target_labels=torch.where(fg, 1, 0),
        target_scores=scores,
        overlaps=torch.zeros(1, num),
    )
    loss = DetectionLoss(NUM_CLASSES, box_gain=7.5, cls_gain=0.5, l1_gain=1.5)
    # A 64 x 128 (H x W) canvas, so the per-axis image normalisation of L1 is visible.
    inputs = BranchInputs(
        branch, out.anchor_points, out.anchor_strides, _targets(), assignment, (SIZE, 2 * SIZE)
    )
    terms = loss.branch_terms(inputs)
    assert terms.names == ("box", "cls", "l1")
    norm = 1.0  # max(0.5, 1)
    pred = branch.boxes[0, anchor]
    pred_xyxy = torch.cat((point - pred[:2], point + pred[2:]))
    ciou = box_ciou(pred_xyxy, target / stride)
    want_box = 7.5 * (1 - ciou) * 0.5 / norm
    scale = torch.tensor([2 * SIZE, SIZE, 2 * SIZE, SIZE], dtype=torch.float32)  # W, H, W, H
    diff = (pred - torch.tensor([1.0, 1.0, 2.0, 1.5])).abs() * stride / scale
    want_l1 = 1.5 * diff.mean() * 0.5 / norm
    want_cls = (
        0.5
        * torch.nn.functional.binary_cross_entropy_with_logits(
            branch.logits, scores, reduction="sum"
        )
        / norm
    )
    torch.testing.assert_close(terms.items, torch.stack((want_box, want_cls, want_l1)))
    torch.testing.assert_close(terms.total, terms.items.sum())


def test_normaliser_is_the_soft_target_sum_floored_at_one() -> None:
    out, targets = _output(), _targets()
    loss = DetectionLoss(NUM_CLASSES)
    assert out.one2many is not None
    result = loss(out.one2many, out, targets, (SIZE, SIZE))
    total = result.assignment.target_scores.sum()
    torch.testing.assert_close(result.normaliser, total.clamp(min=1.0))
    bce = torch.nn.functional.binary_cross_entropy_with_logits(
        out.one2many.logits, result.assignment.target_scores, reduction="sum"
    )
    torch.testing.assert_close(result.terms.as_dict()["cls"], 0.5 * bce / result.normaliser)


def test_loss_is_finite_and_decreases_as_predictions_move_to_targets() -> None:
    out, targets = _output(requires_grad=True), _targets()
    assert out.one2many is not None
    leaves = [out.one2many.boxes, out.one2many.logits, out.one2one.boxes, out.one2one.logits]
    optimiser = torch.optim.Adam(leaves, lr=0.05)
    dual = DualLoss.for_detection(NUM_CLASSES, batch_scaled=False)
    weight = torch.tensor(o2m_weight(0, 10))
    history = []
    for _ in range(40):
        terms = dual(out, targets, weight, (SIZE, SIZE))
        assert bool(torch.isfinite(terms.total)) and bool(torch.isfinite(terms.items).all())
        optimiser.zero_grad()
        terms.total.backward()
        optimiser.step()
        history.append(float(terms.total.detach()))
    assert history[-1] < 0.5 * history[0]
    assert sum(b < a for a, b in itertools.pairwise(history)) > 0.8 * len(history)


def test_padding_capacity_does_not_change_the_loss() -> None:
    # Every reduction over the capacity axis is a max and every sum runs over (B, A, C), which
    # does not depend on the capacity, so extra padding rows leave the result bitwise equal.
    out = _output()
    dual = DualLoss.for_detection(NUM_CLASSES)
    weight = torch.tensor(0.6)
    a = dual(out, _targets(3), weight, (SIZE, SIZE))
    b = dual(out, _targets(8), weight, (SIZE, SIZE))
    assert torch.equal(a.total, b.total)
    assert torch.equal(a.items, b.items)
    assert a.branches is not None and b.branches is not None
    for x, y in zip(a.branches, b.branches, strict=True):
        assert torch.equal(x.assignment.target_scores, y.assignment.target_scores)
        assert torch.equal(x.assignment.fg, y.assignment.fg)


def test_dual_loss_blends_branches_with_a_tensor_weight() -> None:
    out, targets = _output(), _targets()
    dual = DualLoss.for_detection(NUM_CLASSES)
    many, one = dual.branches(out, targets, (SIZE, SIZE))
    for w in (0.8, 0.1):
        terms = dual(out, targets, torch.tensor(w, dtype=torch.float64), (SIZE, SIZE))
        want = (w * many.terms.total + (1 - w) * one.terms.total) * 2  # batch of 2
        torch.testing.assert_close(terms.total, want.float())
        assert terms.names == ("o2o_box", "o2o_cls", "o2o_l1")
        assert torch.equal(terms.items, one.terms.items)
    unscaled = DualLoss.for_detection(NUM_CLASSES, batch_scaled=False)
    half = unscaled(out, targets, torch.tensor(0.5), (SIZE, SIZE)).total
    torch.testing.assert_close(half, 0.5 * many.terms.total + 0.5 * one.terms.total)
    # Each branch runs its own assigner: top-10 one-to-many, one positive per GT one-to-one.
    assert int(one.assignment.fg.sum()) == 3
    assert int(many.assignment.fg.sum()) > 3


def test_o2m_weight_decays_linearly_per_epoch() -> None:
    assert o2m_weight(0, 10) == pytest.approx(0.8)
    assert o2m_weight(9, 10) == pytest.approx(0.1)
    assert o2m_weight(3, 7) == pytest.approx(0.45)
    assert o2m_weight(12, 10) == pytest.approx(0.1)
    assert o2m_weight(0, 1) == pytest.approx(0.8)
    with pytest.raises(ValueError):
        o2m_weight(-1, 10)


def test_task_extras_see_the_box_loss_assignment() -> None:
    seen: list[BranchResult] = []

    class WithExtra(DetectionLoss):
        def extra_terms(
            self,
            result: BranchResult,
            branch: BranchOutput,
            output: ModelOutput,
            targets: PaddedTargets,
            image_size: tuple[int, int] | torch.Tensor,
        ) -> LossTerms | None:
            seen.append(result)
            value = (branch.logits.float().sigmoid().sum(-1) * result.assignment.fg).sum()
            return LossTerms.from_parts([("extra", value / result.normaliser)])

    out, targets = _output(), _targets()
    dual = DualLoss(WithExtra(NUM_CLASSES), WithExtra(NUM_CLASSES, one_to_one=True))
    terms = dual(out, targets, torch.tensor(0.5), (SIZE, SIZE))
    assert terms.names == ("o2o_box", "o2o_cls", "o2o_l1", "o2o_extra")
    assert len(seen) == 2 and terms.branches is not None
    assert seen[0].assignment is terms.branches[0].assignment
    assert seen[1].assignment is terms.branches[1].assignment
    torch.testing.assert_close(terms.branches[1].terms.total, terms.branches[1].terms.items.sum())


def test_fake_tensor_mode_rejects_host_syncs() -> None:
    # The capture test below is only meaningful if host reads fail under FakeTensorMode.
    syncs = (DataDependentOutputException, DynamicOutputShapeException)
    with FakeTensorMode():
        x = torch.rand(4)
        with pytest.raises(syncs):
            x.nonzero()
        with pytest.raises(syncs):
            (x > 0.5).sum().item()
        with pytest.raises(syncs):
            x[x > 0.5]  # boolean-mask indexing
        with pytest.raises(syncs):
            bool(x.sum() > 0)  # a Python branch on a tensor value


def test_assignment_and_loss_run_without_host_synchronisation() -> None:
    out, targets = _output(requires_grad=True), _targets()
    assert out.one2many is not None
    dual = DualLoss.for_detection(NUM_CLASSES)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:

        def fake(t: torch.Tensor) -> torch.Tensor:
            return mode.from_tensor(t)

        def fake_branch(b: BranchOutput) -> BranchOutput:
            return BranchOutput(boxes=fake(b.boxes), logits=fake(b.logits))

        fake_out = ModelOutput(
            one2one=fake_branch(out.one2one),
            one2many=fake_branch(out.one2many),
            anchor_points=fake(out.anchor_points),
            anchor_strides=fake(out.anchor_strides),
        )
        fake_targets = PaddedTargets(
            *(fake(getattr(targets, n)) for n in ("boxes", "labels", "mask", "counts")),
            instance_index=fake(targets.instance_index),
        )
        terms = dual(fake_out, fake_targets, fake(torch.tensor(0.7)), (SIZE, SIZE))
        terms.total.backward()
        assert terms.total.shape == () and terms.items.shape == (3,)


def test_gradients_reach_both_branches_and_one_to_one_stays_in_the_head() -> None:
    torch.manual_seed(0)
    model = build_model("yolo26n", task="detect", num_classes=NUM_CLASSES).train()
    images = torch.rand(2, 3, SIZE, SIZE)
    out = model(images)
    assert out.one2many is not None
    tensors = [out.one2many.boxes, out.one2many.logits, out.one2one.boxes, out.one2one.logits]
    for t in tensors:
        t.retain_grad()
    dual = DualLoss.for_detection(NUM_CLASSES)
    dual(out, _targets(), torch.tensor(0.5), (SIZE, SIZE)).total.backward()
    for t in tensors:
        assert t.grad is not None and float(t.grad.abs().sum()) > 0

    # The one-to-one loss alone trains only the one-to-one head (it reads detached features).
    model.zero_grad(set_to_none=True)
    out = model(images)
    _, one = dual.branches(out, _targets(), (SIZE, SIZE))
    one.terms.total.backward()
    for name, p in model.named_parameters():
        reached = p.grad is not None and float(p.grad.abs().sum()) > 0
        if name.startswith("head.one2one."):
            continue
        assert not reached, name
    assert any(
        p.grad is not None and float(p.grad.abs().sum()) > 0
        for n, p in model.named_parameters()
        if n.startswith("head.one2one.")
    )


class _HostTrafficGuard(TorchDispatchMode):
    """Fails on any op that copies host data into a tensor or reads a tensor back to the host:
    neither may appear inside a CUDA-graph capture (a copy from pageable memory is refused, a
    read synchronises)."""

    FORBIDDEN = frozenset(
        {
            torch.ops.aten.lift_fresh.default,
            torch.ops.aten.lift_fresh_copy.default,
            torch.ops.aten._local_scalar_dense.default,
            torch.ops.aten.nonzero.default,
        }
    )

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if func in self.FORBIDDEN:
            raise AssertionError(f"host traffic inside the loss: {func}")
        return func(*args, **(kwargs or {}))


def test_guard_catches_host_copies_and_reads() -> None:
    x = torch.rand(3)
    with _HostTrafficGuard(), pytest.raises(AssertionError, match="lift_fresh"):
        x.new_tensor([1.0, 2.0])
    with _HostTrafficGuard(), pytest.raises(AssertionError, match="local_scalar"):
        x.sum().item()


@pytest.mark.parametrize("tensor_size", [False, True])
def test_loss_neither_copies_from_nor_reads_back_to_the_host(tensor_size: bool) -> None:
    out, targets = _output(requires_grad=True), _targets()
    dual = DualLoss.for_detection(NUM_CLASSES)
    weight = torch.tensor(0.7, dtype=torch.float64)
    size: tuple[int, int] | torch.Tensor = (SIZE, SIZE)
    if tensor_size:
        size = torch.tensor([SIZE, SIZE])
    with _HostTrafficGuard():
        terms = dual(out, targets, weight, size)
        terms.total.backward()
    reference = dual(out, targets, weight, (SIZE, SIZE))
    assert torch.equal(terms.total.detach(), reference.total.detach())
