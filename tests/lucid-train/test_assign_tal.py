"""Task-aligned assignment: candidacy, top-k, conflicts, the one-to-one cut, soft targets, and the
edge cases of the reference (all-zero metrics, the normalisation floor, padding, empty images)."""

from __future__ import annotations

import pytest
import torch

from lucid_models import make_anchors
from lucid_train.assign import (
    TaskAlignedAssigner,
    anchors_in_pixels,
    box_ciou,
    pairwise_ciou,
)
from lucid_train.assign.padded_targets import PaddedTargets
from lucid_train.assign.tal import SOFT_TARGET_EPS

NUM_CLASSES = 3


def _anchors(size: int = 64) -> torch.Tensor:
    """Pixel anchors of a ``size`` x ``size`` canvas at strides 8, 16, 32: ``(A, 2)``."""
    sizes = [(size // s, size // s) for s in (8, 16, 32)]
    points, strides = make_anchors(sizes)
    return anchors_in_pixels(points, strides)


def _targets(boxes: list[list[list[float]]], labels: list[list[int]]) -> PaddedTargets:
    """Padded targets from per-image lists, padded to the longest image with zero rows."""
    capacity = max(1, *(len(b) for b in boxes))
    batch = len(boxes)
    out_boxes = torch.zeros(batch, capacity, 4)
    out_labels = torch.zeros(batch, capacity, dtype=torch.int64)
    mask = torch.zeros(batch, capacity, dtype=torch.bool)
    for i, (image_boxes, image_labels) in enumerate(zip(boxes, labels, strict=True)):
        n = len(image_boxes)
        if n:
            out_boxes[i, :n] = torch.tensor(image_boxes)
            out_labels[i, :n] = torch.tensor(image_labels)
            mask[i, :n] = True
    index = torch.where(mask, torch.arange(batch * capacity).view(batch, capacity), -1)
    return PaddedTargets(out_boxes, out_labels, mask, mask.sum(1), index)


def _preds_around(anchors: torch.Tensor, batch: int, half: float = 6.0) -> torch.Tensor:
    """Predicted boxes: a ``2 * half`` square centred on every anchor, ``(B, A, 4)``."""
    boxes = torch.cat((anchors - half, anchors + half), -1)
    return boxes.unsqueeze(0).expand(batch, -1, -1).clone()


def _inside(anchors: torch.Tensor, box: list[float]) -> torch.Tensor:
    x, y = anchors.unbind(-1)
    return (x > box[0]) & (x < box[2]) & (y > box[1]) & (y < box[3])


def test_positives_are_candidates_capped_at_topk_and_scored_by_alignment() -> None:
    anchors = _anchors()
    box = [4.0, 4.0, 60.0, 44.0]
    targets = _targets([[box]], [[1]])
    preds = _preds_around(anchors, 1, half=12.0)
    scores = torch.full((1, anchors.shape[0], NUM_CLASSES), 0.3)
    a = TaskAlignedAssigner(NUM_CLASSES, topk=10)(scores, preds, anchors, targets)
    inside = _inside(anchors, box)
    assert int(a.fg.sum()) == 10
    assert bool((a.fg[0] <= inside).all())
    # The ten positives are the ten best-aligned candidates: with equal scores, the best CIoU.
    u = pairwise_ciou(targets.boxes, preds)[0, 0].clamp(min=0)
    ranked = torch.where(inside, u, -1.0).topk(10).values
    assert torch.allclose(u[a.fg[0]].sort(descending=True).values, ranked)
    assert bool((a.target_labels[a.fg] == 1).all())
    assert torch.equal(a.target_boxes[a.fg], torch.tensor([box]).expand(10, 4))


@pytest.mark.parametrize(("topk", "topk2"), [(10, None), (7, 1)])
def test_all_zero_metrics_keep_only_the_candidates_among_the_rows_first_k(
    topk: int, topk2: int | None
) -> None:
    # Zero class probabilities make every alignment 0. The authors take top-k over the whole
    # tied row, then drop the non-candidates (T5): a ground truth keeps only the candidates
    # that topk's order puts among its k, possibly none.
    anchors = _anchors()
    boxes = [[40.0, 40.0, 62.0, 62.0], [2.0, 30.0, 20.0, 50.0], [0.0, 0.0, 30.0, 30.0]]
    targets = _targets([boxes], [[0, 2, 1]])
    scores = torch.zeros(1, anchors.shape[0], NUM_CLASSES)
    a = TaskAlignedAssigner(NUM_CLASSES, topk=topk, topk2=topk2)(
        scores, _preds_around(anchors, 1), anchors, targets
    )
    first = torch.zeros(anchors.shape[0], dtype=torch.bool)
    first[torch.zeros(anchors.shape[0]).topk(topk).indices] = True
    kept = []
    for m, box in enumerate(boxes):
        inside = _inside(anchors, box)
        mine = a.fg[0] & (a.target_index[0] == m)
        assert bool((mine <= (inside & first)).all())
        kept.append(int(mine.sum()))
    assert 0 in kept and max(kept) > 0  # one box holds none of the first k, one holds some
    assert float(a.target_scores.sum()) == 0.0  # zero metric, zero soft targets


def test_soft_targets_divide_by_the_best_alignment_plus_the_authors_epsilon() -> None:
    # A small concentric prediction (u ~ 0.007) and s = 1e-4 give t ~ 1e-15: the authors'
    # absolute 1e-9 (T6) crushes the best anchor's soft target far below its overlap.
    anchors = _anchors()
    box = [8.0, 8.0, 56.0, 56.0]
    targets = _targets([[box]], [[0]])
    preds = torch.tensor([30.0, 30.0, 34.0, 34.0]).expand(1, anchors.shape[0], 4).clone()
    scores = torch.full((1, anchors.shape[0], NUM_CLASSES), 1e-4)
    a = TaskAlignedAssigner(NUM_CLASSES, topk=10)(scores, preds, anchors, targets)
    u = a.overlaps[a.fg]
    assert int(a.fg.sum()) == 10
    assert 0.0 < float(u.max()) < 0.01
    t = scores[a.fg][:, 0].sqrt() * u.pow(6)
    best = a.target_scores[a.fg].sum(-1).max()
    torch.testing.assert_close(best, t.max() * u.max() / (t.max() + SOFT_TARGET_EPS))
    assert float(best) < 1e-5 * float(u.max())


def test_weight_is_alignment_rescaled_to_the_best_overlap() -> None:
    anchors = _anchors()
    targets = _targets([[[4.0, 4.0, 60.0, 44.0]]], [[2]])
    preds = _preds_around(anchors, 1, half=10.0)
    scores = torch.rand(
        1, anchors.shape[0], NUM_CLASSES, generator=torch.Generator().manual_seed(0)
    )
    assigner = TaskAlignedAssigner(NUM_CLASSES, topk=10)
    a = assigner(scores, preds, anchors, targets)
    fg = a.fg[0]
    s = scores[0, fg, 2]
    u = a.overlaps[0, fg]
    t = s.sqrt() * u.pow(6)
    expected = t * u.max() / (t.max() + SOFT_TARGET_EPS)
    torch.testing.assert_close(a.target_scores[0, fg, 2], expected)
    assert float(a.target_scores[0, fg][:, [0, 1]].abs().sum()) == 0.0
    assert float(a.target_scores[0, ~fg].abs().sum()) == 0.0


def test_conflicting_anchor_goes_to_the_gt_it_overlaps_most() -> None:
    anchors = _anchors()
    # Two overlapping boxes; predictions are a copy of box 1 everywhere, so every shared
    # anchor overlaps box 1 more than box 0, while box 0's class scores far higher: the
    # alignment metric would favour box 0, the overlap (the authors' rule) favours box 1.
    box0, box1 = [0.0, 0.0, 40.0, 40.0], [8.0, 8.0, 48.0, 48.0]
    targets = _targets([[box0, box1]], [[0, 1]])
    preds = torch.tensor(box1).expand(1, anchors.shape[0], 4).clone()
    scores = torch.tensor([0.99, 1e-6, 0.5]).expand(1, anchors.shape[0], NUM_CLASSES).clone()
    u = pairwise_ciou(targets.boxes, preds)[0]
    t = scores[0, :, [0, 1]].T.sqrt() * u.pow(6)
    shared = _inside(anchors, box0) & _inside(anchors, box1)
    assert bool((t[0, shared] > t[1, shared]).all()) and bool((u[1, shared] > u[0, shared]).all())
    a = TaskAlignedAssigner(NUM_CLASSES, topk=40)(scores, preds, anchors, targets)
    assert int(shared.sum()) > 0
    assert bool(a.fg[0, shared].all())
    assert bool((a.target_index[0, shared] == 1).all())
    assert bool((a.target_labels[0, shared] == 1).all())


def test_conflict_ties_go_to_the_lowest_row() -> None:
    anchors = _anchors()
    box = [8.0, 8.0, 56.0, 40.0]
    targets = _targets([[box, box]], [[1, 1]])  # two identical ground truths
    scores = torch.full((1, anchors.shape[0], NUM_CLASSES), 0.5)
    a = TaskAlignedAssigner(NUM_CLASSES, topk=10)(
        scores, _preds_around(anchors, 1), anchors, targets
    )
    assert int(a.fg.sum()) == 10
    assert bool((a.target_index[a.fg] == 0).all())


def test_padding_rows_are_never_assigned() -> None:
    anchors = _anchors()
    real = [[4.0, 4.0, 30.0, 30.0]]
    targets = _targets([real], [[0]])
    # Same image with two padding rows whose (garbage) boxes cover the whole canvas.
    padded = _targets([real + [[0.0, 0.0, 64.0, 64.0]] * 2], [[0, 1, 2]])
    padded.mask[0, 1:] = False
    scores = torch.full((1, anchors.shape[0], NUM_CLASSES), 0.5)
    preds = _preds_around(anchors, 1)
    assigner = TaskAlignedAssigner(NUM_CLASSES, topk=10)
    a, b = assigner(scores, preds, anchors, targets), assigner(scores, preds, anchors, padded)
    assert bool((b.target_index == 0).all())
    for name in ("fg", "target_index", "target_boxes", "target_labels", "target_scores"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_image_without_targets_is_all_background() -> None:
    anchors = _anchors()
    targets = _targets([[[4.0, 4.0, 30.0, 30.0]], []], [[1], []])
    scores = torch.full((2, anchors.shape[0], NUM_CLASSES), 0.5)
    a = TaskAlignedAssigner(NUM_CLASSES, topk=10)(
        scores, _preds_around(anchors, 2), anchors, targets
    )
    assert int(a.fg[0].sum()) > 0
    assert not bool(a.fg[1].any())
    for name in ("target_index", "target_boxes", "target_labels", "target_scores", "overlaps"):
        assert float(getattr(a, name)[1].abs().sum()) == 0.0, name


def test_batch_without_any_target_is_all_background() -> None:
    anchors = _anchors()
    targets = _targets([[], []], [[], []])  # capacity 1, all padding
    scores = torch.full((2, anchors.shape[0], NUM_CLASSES), 0.5)
    a = TaskAlignedAssigner(NUM_CLASSES, topk=7, topk2=1)(
        scores, _preds_around(anchors, 2), anchors, targets
    )
    assert not bool(a.fg.any())
    assert float(a.target_scores.sum()) == 0.0


def test_one_to_one_keeps_one_positive_per_gt() -> None:
    anchors = _anchors()
    boxes = [[2.0, 2.0, 30.0, 30.0], [34.0, 2.0, 62.0, 30.0], [10.0, 34.0, 50.0, 62.0]]
    targets = _targets([boxes], [[0, 1, 2]])
    scores = torch.full((1, anchors.shape[0], NUM_CLASSES), 0.5)
    preds = _preds_around(anchors, 1, half=10.0)
    o2o = TaskAlignedAssigner(NUM_CLASSES, topk=7, topk2=1)(scores, preds, anchors, targets)
    o2m = TaskAlignedAssigner(NUM_CLASSES, topk=10)(scores, preds, anchors, targets)
    assert int(o2o.fg.sum()) == 3
    assert sorted(o2o.target_index[o2o.fg].tolist()) == [0, 1, 2]
    counts = torch.bincount(o2m.target_index[o2m.fg], minlength=3)
    assert bool((counts <= 10).all()) and int(counts.sum()) > 3
    # The kept positive is the best-aligned one (equal scores: the best overlap).
    u = pairwise_ciou(targets.boxes, preds)[0]
    for m in range(3):
        kept = int(torch.nonzero(o2o.fg[0] & (o2o.target_index[0] == m))[0, 0])
        candidates = _inside(anchors, boxes[m])
        assert float(u[m, kept]) == float(torch.where(candidates, u[m], -1.0).max())


def test_one_to_one_falls_back_when_its_best_anchor_is_taken() -> None:
    anchors = _anchors(32)  # strides 8/16/32 over a 32 px canvas
    # GT 1 lies inside GT 0; predictions equal GT 1 everywhere, so GT 1 wins every shared
    # anchor, including GT 0's best; GT 0 must still keep one positive of its own.
    box0, box1 = [0.0, 0.0, 32.0, 32.0], [2.0, 2.0, 14.0, 14.0]
    targets = _targets([[box0, box1]], [[0, 1]])
    preds = torch.tensor(box1).expand(1, anchors.shape[0], 4).clone()
    scores = torch.full((1, anchors.shape[0], NUM_CLASSES), 0.5)
    a = TaskAlignedAssigner(NUM_CLASSES, topk=7, topk2=1)(scores, preds, anchors, targets)
    assert sorted(a.target_index[a.fg].tolist()) == [0, 1]
    own = a.fg[0] & (a.target_index[0] == 0)
    assert not bool(_inside(anchors, box1)[own].any())


def test_small_target_rule_gives_tiny_boxes_candidates() -> None:
    points, strides = make_anchors([(8, 8)], (8,))  # one level, anchors at 4, 12, 20, ...
    anchors = anchors_in_pixels(points, strides)
    targets = _targets([[[13.0, 13.0, 19.0, 19.0]]], [[0]])  # 6x6, between anchor centres
    scores = torch.full((1, anchors.shape[0], NUM_CLASSES), 0.5)
    preds = _preds_around(anchors, 1)
    tal = TaskAlignedAssigner(NUM_CLASSES, small_target=None)(scores, preds, anchors, targets)
    stal = TaskAlignedAssigner(NUM_CLASSES, small_target=16.0)(scores, preds, anchors, targets)
    assert int(tal.fg.sum()) == 0
    assert int(stal.fg.sum()) == 4  # widened to (8, 8, 24, 24): anchors at 12 and 20
    # Candidacy only: targets and overlaps still use the real 6x6 box.
    assert torch.equal(stal.target_boxes[stal.fg], torch.tensor([[13.0, 13.0, 19.0, 19.0]] * 4))
    real = box_ciou(preds[0, stal.fg[0]], stal.target_boxes[0, stal.fg[0]]).clamp(min=0)
    torch.testing.assert_close(stal.overlaps[0, stal.fg[0]], real)


def test_precomputed_overlaps_and_candidates_replace_the_defaults() -> None:
    anchors = _anchors()
    targets = _targets([[[4.0, 4.0, 60.0, 60.0]]], [[0]])
    num_anchors = anchors.shape[0]
    scores = torch.full((1, num_anchors, NUM_CLASSES), 0.5)
    candidates = torch.zeros(1, 1, num_anchors, dtype=torch.bool)
    candidates[0, 0, [3, 5]] = True
    overlaps = torch.zeros(1, 1, num_anchors)
    overlaps[0, 0, 3], overlaps[0, 0, 5] = 0.2, 0.9
    a = TaskAlignedAssigner(NUM_CLASSES, topk=7, topk2=1)(
        scores, _preds_around(anchors, 1), anchors, targets,
        overlaps=overlaps, candidates=candidates,
    )  # fmt: skip
    assert torch.nonzero(a.fg[0]).flatten().tolist() == [5]
    torch.testing.assert_close(a.overlaps[0, 5], torch.tensor(0.9))
