"""Segmentation terms: padded instance masks, the cropped and area-normalised mask BCE, the
semantic BCE + Dice, detached prototypes for the one-to-one branch, positive slots, padding,
empty images and capture safety."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from lucid_models import make_anchors
from lucid_models.outputs import BranchOutput, ModelOutput
from lucid_train.assign import Assignment, TaskAlignedAssigner, pairwise_ciou
from lucid_train.assign.padded_targets import PaddedTargets, pad_targets
from lucid_train.losses import segment as segment_module
from lucid_train.losses.detection import LossTerms
from lucid_train.losses.positives import positive_slots, slot_capacity
from lucid_train.losses.progloss import DualLoss
from lucid_train.losses.segment import (
    SegmentLoss,
    SegmentTargets,
    mask_aware_overlaps,
    mask_loss,
    masks_from_instance_map,
    pad_instance_masks,
    semantic_loss,
    semantic_target,
    with_instance_map,
    with_instance_masks,
)

SIZE = 64
GRID = SIZE // 4
NUM_CLASSES = 3


def _padded(
    boxes: list[list[list[float]]], labels: list[list[int]], capacity: int | None = None
) -> PaddedTargets:
    B = len(boxes)
    M = capacity or max(1, *(len(b) for b in boxes))
    out = torch.zeros(B, M, 4)
    out_labels = torch.zeros(B, M, dtype=torch.long)
    mask = torch.zeros(B, M, dtype=torch.bool)
    index = torch.full((B, M), -1, dtype=torch.long)
    flat = 0
    for b, rows in enumerate(boxes):
        for m, row in enumerate(rows):
            out[b, m] = torch.tensor(row)
            out_labels[b, m] = labels[b][m]
            mask[b, m] = True
            index[b, m] = flat
            flat += 1
    return PaddedTargets(out, out_labels, mask, mask.sum(1), index)


def _box_mask(box: list[float]) -> torch.Tensor:
    """A mask on the 4-px grid filling ``box`` (pixels) minus a one-cell margin."""
    m = torch.zeros(GRID, GRID, dtype=torch.bool)
    x1, y1, x2, y2 = (int(v) // 4 for v in box)
    m[y1 + 1 : y2 - 1, x1 + 1 : x2 - 1] = True
    return m


# --- padding the instance masks -------------------------------------------------------------


def test_pad_instance_masks_follows_instance_index_and_leaves_padding_empty() -> None:
    targets = _padded([[[0, 0, 8, 8], [8, 8, 16, 16]], [[4, 4, 20, 20]]], [[0, 1], [2]], capacity=3)
    flat = torch.zeros(3, GRID, GRID, dtype=torch.bool)
    for t in range(3):
        flat[t, t, t] = True
    padded = pad_instance_masks(flat, targets)
    assert padded.shape == (2, 3, GRID, GRID)
    assert padded[0, 1, 1, 1] and padded[1, 0, 2, 2]
    assert not padded[0, 2].any() and not padded[1, 1:].any()
    empty = pad_instance_masks(torch.zeros(0, GRID, GRID, dtype=torch.bool), _padded([[]], [[]]))
    assert empty.shape == (1, 1, GRID, GRID) and not empty.any()
    attached = with_instance_masks(targets, flat)
    assert isinstance(attached, SegmentTargets) and attached.masks is not None
    assert attached.to("cpu").masks is not None


@pytest.mark.parametrize("capacity", [None, 40])
def test_masks_from_the_instance_map_equal_the_padded_expanded_masks(
    capacity: int | None, small_synthetic: Callable[[str], Path]
) -> None:
    """The training step's device-side masks (one compare on the instance map) are the host's
    expand-then-pad masks, bit for bit, padding rows empty, at any capacity."""
    from lucid_train.data import LucidDataModule
    from lucid_train.data.transport import Batch

    dm = LucidDataModule("segment", small_synthetic("segment"), img_size=64, batch_size=4,
                         num_workers=0)  # fmt: skip
    dm.setup("fit")
    batch: Batch = next(iter(dm.train_dataloader()))
    targets = pad_targets(batch, capacity=capacity)
    assert int(targets.counts.sum()) > 0 and not bool(targets.mask.all())
    expected = pad_instance_masks(batch.instance_masks(), targets)
    built = masks_from_instance_map(batch.instance_map, targets)
    assert built.dtype == torch.bool and built.shape == expected.shape
    assert torch.equal(built, expected)
    assert not built[~targets.mask].any()
    attached = with_instance_map(targets, batch.instance_map)
    assert isinstance(attached, SegmentTargets) and attached.masks is not None
    assert torch.equal(attached.masks, expected)


# --- the mask loss --------------------------------------------------------------------------


def _mask_case(
    sign: float,
) -> tuple[torch.Tensor, torch.Tensor, Assignment, torch.Tensor, torch.Tensor]:
    """Two positives of one image, each assigned its own instance; one prototype per instance."""
    boxes = [[4.0, 8.0, 40.0, 36.0], [28.0, 24.0, 60.0, 60.0]]
    targets = _padded([boxes], [[0, 1]])
    masks = torch.stack([_box_mask(b) for b in boxes])[None]  # (1, 2, h, w)
    prototypes = (masks.float() * 2 - 1) * 20.0 * sign  # +-20 logits
    A = 30
    coefficients = torch.zeros(1, A, 2)
    coefficients[0, 5, 0] = 1.0
    coefficients[0, 17, 1] = 1.0
    fg = torch.zeros(1, A, dtype=torch.bool)
    fg[0, [5, 17]] = True
    index = torch.zeros(1, A, dtype=torch.long)
    index[0, 17] = 1
    assignment = Assignment(
        fg, index, torch.zeros(1, A, 4), index, torch.zeros(1, A, 3), fg.float()
    )
    return coefficients, prototypes, assignment, masks, targets.boxes


def test_mask_loss_is_near_zero_for_perfect_logits_and_large_for_inverted_ones() -> None:
    good = mask_loss(*_mask_case(1.0), (SIZE, SIZE), capacity=8)
    bad = mask_loss(*_mask_case(-1.0), (SIZE, SIZE), capacity=8)
    assert float(good) < 1e-6
    # Inverted logits cost 20 per cropped pixel; cropped pixels / (box area in cells) = 1.
    assert float(bad) == pytest.approx(20.0, rel=1e-3)


def test_mask_loss_ignores_logits_outside_the_assigned_box() -> None:
    coefficients, prototypes, assignment, masks, boxes = _mask_case(1.0)
    base = mask_loss(coefficients, prototypes, assignment, masks, boxes, (SIZE, SIZE), 8)
    outside = prototypes.clone()
    outside[:, 0, :, 11:] = -50.0  # columns right of box 0 (x2 = 40 px = column 10)
    outside[:, 0, :1] = 7.0  # the row above it
    moved = mask_loss(coefficients, outside, assignment, masks, boxes, (SIZE, SIZE), 8)
    torch.testing.assert_close(moved, base)


def test_mask_loss_is_an_average_over_positives_not_a_sum() -> None:
    coefficients, prototypes, assignment, masks, boxes = _mask_case(-1.0)
    both = mask_loss(coefficients, prototypes, assignment, masks, boxes, (SIZE, SIZE), 8)
    one_fg = assignment.fg.clone()
    one_fg[0, 17] = False
    single = dataclasses.replace(assignment, fg=one_fg)
    first = mask_loss(coefficients, prototypes, single, masks, boxes, (SIZE, SIZE), 8)
    assert float(both) == pytest.approx(float(first), rel=1e-3)  # both cost ~20 each


# --- mask-aware assignment -----------------------------------------------------------------


def test_mask_aware_overlap_averages_box_iou_with_the_mask_iou_of_the_best_pairs() -> None:
    box = [8.0, 8.0, 40.0, 40.0]
    targets = _padded([[box]], [[0]])
    gt_mask = _box_mask(box)
    attached = with_instance_masks(targets, gt_mask[None])
    prototypes = ((gt_mask.float() * 2 - 1) * 5.0)[None, None]  # (1, 1, h, w)
    pred_boxes = torch.tensor([[box, box, [0.0, 0.0, 64.0, 64.0]]])
    coefficients = torch.tensor([[[1.0], [-1.0], [1.0]]])  # anchor 1 predicts the inverse mask
    scores = torch.full((1, 3, NUM_CLASSES), 0.5)
    scores[0, 0] = 0.9  # anchor 0 leads the box alignment
    candidates = torch.ones(1, 1, 3, dtype=torch.bool)
    kwargs = {"alpha": 0.5, "beta": 6.0}
    args = (scores, pred_boxes, coefficients, prototypes, attached, candidates, (SIZE, SIZE))
    out = mask_aware_overlaps(*args, pairs=3, **kwargs)
    loose = float(pairwise_ciou(targets.boxes, pred_boxes)[0, 0, 2])
    assert float(out[0, 0, 0]) == pytest.approx(1.0, abs=1e-5)  # box and mask both exact
    assert float(out[0, 0, 1]) == pytest.approx(0.5, abs=1e-5)  # exact box, disjoint mask
    assert float(out[0, 0, 2]) == pytest.approx((loose + 1.0) / 2, abs=1e-5)  # exact mask
    only_best = mask_aware_overlaps(*args, pairs=1, **kwargs)  # anchor 0 has the best metric
    assert float(only_best[0, 0, 0]) == pytest.approx(1.0, abs=1e-5)
    assert float(only_best[0, 0, 2]) == pytest.approx(loose / 2, abs=1e-6)  # no mask IoU


def test_mask_aware_overlap_is_the_same_when_decoded_image_by_image(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    output = _output(3, seed=9)
    targets = _targets([BOXES, [BOXES[1]], []])
    assert output.one2many is not None and output.one2many.mask_coefficients is not None
    assert output.prototypes is not None and targets.masks is not None
    B, A = output.one2many.logits.shape[:2]
    corner = torch.rand(B, A, 2, generator=torch.Generator().manual_seed(0)) * 30
    boxes = torch.cat((corner, corner + 20.0), -1)
    candidates = torch.ones(B, targets.capacity, A, dtype=torch.bool) & targets.mask[..., None]
    scores = output.one2many.logits.detach().sigmoid()
    call = (scores, boxes, output.one2many.mask_coefficients.detach(), output.prototypes.detach())
    whole = mask_aware_overlaps(
        *call, targets, candidates, (SIZE, SIZE), alpha=0.5, beta=6.0, pairs=9
    )
    monkeypatch.setattr(segment_module, "MASK_PIXELS_PER_CHUNK", 1)
    split = mask_aware_overlaps(
        *call, targets, candidates, (SIZE, SIZE), alpha=0.5, beta=6.0, pairs=9
    )
    torch.testing.assert_close(split, whole, atol=0, rtol=0)
    assert (whole > 0).any()


@pytest.mark.parametrize(
    ("device", "dtype", "width"),
    [
        pytest.param("cpu", torch.float32, 40, id="cpu-f32"),
        pytest.param("cpu", torch.float16, 40, id="cpu-f16"),
        pytest.param("cpu", torch.bfloat16, 300, id="cpu-bf16-wide"),  # rows past bf16's 256
        pytest.param("cuda", torch.float16, 160, id="cuda-f16", marks=pytest.mark.gpu),
        pytest.param("cuda", torch.bfloat16, 320, id="cuda-bf16-wide", marks=pytest.mark.gpu),
    ],
)
def test_mask_counts_by_rows_equal_the_boolean_counts_to_the_last_bit(
    device: str, dtype: torch.dtype, width: int
) -> None:
    """The GPU's mask-IoU counts (0/1 map, box by rows and columns) are the CPU's boolean counts
    exactly, with logits at exactly 0 (not inside a mask), NaN, and boxes on fractional cells."""
    g = torch.Generator().manual_seed(3)
    b, M, k, h, w = 2, 3, 4, 24, width
    logits = torch.randn(b, M * k, h, w, generator=g).to(dtype)
    logits[torch.rand(logits.shape, generator=g) < 0.2] = 0.0
    logits[0, 0, 0, :3] = float("nan")
    corners = torch.rand(b, M * k, 2, generator=g) * torch.tensor([w, h]) * 0.8
    sides = torch.rand(b, M * k, 2, generator=g) * torch.tensor([w, h]) * 0.6
    box = torch.cat((corners, corners + sides), -1)
    box[:, 1] = torch.tensor([0.0, 0.0, w, h])  # pair 1: a whole image of positive logits but
    logits[:, 1] = 1.0  # its first column, so each row counts w - 1 (odd: bf16 would round it)
    logits[:, 1, :, 0] = -1.0
    in_x = (torch.arange(w) >= box[..., 0:1]) & (torch.arange(w) < box[..., 2:3])
    in_y = (torch.arange(h) >= box[..., 1:2]) & (torch.arange(h) < box[..., 3:4])
    gt = torch.rand(b, M, 1, h * w, generator=g) < 0.5
    want = segment_module._mask_counts_by_cells(logits, in_y, in_x, gt)
    args = [t.to(device) for t in (logits, in_y, in_x, gt)]
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        got = segment_module._mask_counts_by_rows(*args)
    for a, e in zip(got, want, strict=True):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.cpu(), e, atol=0, rtol=0)
    assert (want[0] > 0).any() and (want[1] > want[0]).any()


# --- semantic loss --------------------------------------------------------------------------


def test_semantic_target_is_the_per_class_union_and_ignores_padding() -> None:
    masks = torch.zeros(1, 3, 4, 4, dtype=torch.bool)
    masks[0, 0, 0, 0] = masks[0, 1, 1, 1] = masks[0, 2, 2, 2] = True
    labels = torch.tensor([[2, 2, 0]])
    valid = torch.tensor([[True, True, False]])
    target = semantic_target(masks, labels, valid, NUM_CLASSES)
    assert target.shape == (1, NUM_CLASSES, 4, 4)
    assert target[0, 2].sum() == 2 and target[0, 2, 0, 0] == 1 and target[0, 2, 1, 1] == 1
    assert target[0, 0].sum() == 0 and target[0, 1].sum() == 0


def test_semantic_loss_is_near_zero_for_perfect_logits_and_downsamples_the_target() -> None:
    target = torch.zeros(1, NUM_CLASSES, 8, 8)
    target[0, 1, 2:6, 2:6] = 1
    logits = (target[..., ::2, ::2] * 2 - 1) * 30.0  # nearest-downsampled grid
    assert float(semantic_loss(logits, target)) < 1e-6
    assert float(semantic_loss(-logits, target)) > 5.0


# --- positive slots -------------------------------------------------------------------------


def test_positive_slots_keep_anchor_order_and_count_overflow() -> None:
    fg = torch.tensor([[False, True, False, True, True], [False] * 5])
    slots = positive_slots(fg, 4)
    assert slots.anchor.tolist() == [[1, 3, 4, 0], [0, 0, 0, 0]]
    assert slots.valid.tolist() == [[True, True, True, False], [False] * 4]
    assert slots.dropped.tolist() == [0, 0]
    assert positive_slots(fg, 2).dropped.tolist() == [1, 0]
    assert slot_capacity(TaskAlignedAssigner(3, topk=10), 4, 8400) == 40
    assert slot_capacity(TaskAlignedAssigner(3, topk=7, topk2=1), 4, 8400) == 4
    assert slot_capacity(TaskAlignedAssigner(3, topk=10), 4, 30) == 30


# --- the branch loss ------------------------------------------------------------------------


BOXES = [[4.0, 8.0, 40.0, 36.0], [28.0, 24.0, 60.0, 60.0]]


def _output(batch: int, seed: int) -> ModelOutput:
    gen = torch.Generator().manual_seed(seed)
    points, strides = make_anchors([(8, 8), (4, 4), (2, 2)])
    A = points.shape[0]

    def branch() -> BranchOutput:
        return BranchOutput(
            boxes=(torch.rand(batch, A, 4, generator=gen) * 2 + 0.5).requires_grad_(),
            logits=torch.randn(batch, A, NUM_CLASSES, generator=gen).requires_grad_(),
            mask_coefficients=torch.randn(batch, A, 8, generator=gen).requires_grad_(),
        )

    return ModelOutput(
        branch(),
        branch(),
        points,
        strides,
        prototypes=torch.randn(batch, 8, GRID, GRID, generator=gen).requires_grad_(),
        semantic_logits=torch.randn(
            batch, NUM_CLASSES, SIZE // 8, SIZE // 8, generator=gen
        ).requires_grad_(),
    )


def _targets(images: list[list[list[float]]], capacity: int | None = None) -> SegmentTargets:
    labels = [[i % NUM_CLASSES for i in range(len(b))] for b in images]
    targets = _padded(images, labels, capacity)
    flat = [_box_mask(box) for rows in images for box in rows]
    stack = torch.stack(flat) if flat else torch.zeros(0, GRID, GRID, dtype=torch.bool)
    return with_instance_masks(targets, stack)


def _dual_terms(targets: SegmentTargets, output: ModelOutput) -> LossTerms:
    loss = DualLoss(SegmentLoss(NUM_CLASSES), SegmentLoss(NUM_CLASSES, one_to_one=True))
    return loss(output, targets, torch.tensor(0.8), (SIZE, SIZE))


def test_padding_rows_change_nothing() -> None:
    output = _output(2, seed=1)
    tight = _dual_terms(_targets([BOXES, [BOXES[1]]]), output)
    padded = _dual_terms(_targets([BOXES, [BOXES[1]]], capacity=6), output)
    # Slots scale with the capacity, but every sum over them runs by position: bit for bit.
    assert torch.equal(padded.total, tight.total)
    assert torch.equal(padded.items, tight.items)
    assert tight.names == tuple(f"o2o_{n}" for n in ("box", "cls", "l1", "seg", "sem"))


def test_an_empty_image_adds_nothing_to_the_mask_loss() -> None:
    output = _output(2, seed=2)
    loss = SegmentLoss(NUM_CLASSES)
    assert output.one2many is not None and output.one2many.mask_coefficients is not None
    both = loss(output.one2many, output, _targets([BOXES, []]), (SIZE, SIZE))
    first = BranchOutput(
        boxes=output.one2many.boxes[:1],
        logits=output.one2many.logits[:1],
        mask_coefficients=output.one2many.mask_coefficients[:1],
    )
    assert output.prototypes is not None
    alone = ModelOutput(
        first, first, output.anchor_points, output.anchor_strides, output.prototypes[:1]
    )
    single = loss(first, alone, _targets([BOXES]), (SIZE, SIZE))
    i = both.terms.names.index("seg")
    torch.testing.assert_close(both.terms.items[i], single.terms.items[i], atol=1e-6, rtol=1e-6)


def test_one_to_one_branch_trains_its_coefficients_but_not_the_prototypes() -> None:
    output = _output(2, seed=3)
    targets = _targets([BOXES, [BOXES[1]]])
    o2o = SegmentLoss(NUM_CLASSES, one_to_one=True)(output.one2one, output, targets, (SIZE, SIZE))
    names = o2o.terms.names
    seg = o2o.terms.total  # includes seg and sem
    assert o2o.terms.items[names.index("seg")] > 0 and o2o.terms.items[names.index("sem")] > 0
    seg.backward()
    assert output.prototypes is not None and output.prototypes.grad is None
    assert output.semantic_logits is not None and output.semantic_logits.grad is None
    assert output.one2one.mask_coefficients is not None
    grad = output.one2one.mask_coefficients.grad
    assert grad is not None and grad.abs().sum() > 0
    output2 = _output(2, seed=3)
    assert output2.one2many is not None
    SegmentLoss(NUM_CLASSES)(
        output2.one2many, output2, targets, (SIZE, SIZE)
    ).terms.total.backward()
    assert output2.prototypes is not None and output2.prototypes.grad is not None
    assert output2.semantic_logits is not None and output2.semantic_logits.grad is not None


def test_semantic_term_is_zero_without_positives() -> None:
    output = _output(1, seed=4)
    result = SegmentLoss(NUM_CLASSES)(output.one2one, output, _targets([[]]), (SIZE, SIZE))
    names = result.terms.names
    assert float(result.terms.items[names.index("sem")]) == 0.0
    assert float(result.terms.items[names.index("seg")]) == 0.0


def test_plain_targets_are_refused_with_a_pointer_to_the_fix() -> None:
    output = _output(1, seed=5)
    with pytest.raises(TypeError, match="with_instance_masks"):
        SegmentLoss(NUM_CLASSES)(output.one2one, output, _padded([BOXES], [[0, 1]]), (SIZE, SIZE))


def test_runs_under_fake_tensors_so_it_has_no_data_dependent_ops() -> None:
    with FakeTensorMode():
        output = _output(2, seed=6)
        targets = _targets([BOXES, []], capacity=4)
        terms = _dual_terms(targets, output)
        terms.total.backward()
    assert terms.items.shape == (5,)
