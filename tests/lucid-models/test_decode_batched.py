"""`nms_decode` finds every image's candidates, boxes and NMS inputs for the whole batch at once
and reads the host three times a batch (plus the NMS kernel's own read an image), where it read
it three times an image. The detections are the per-image decode's, bit for bit: the reference
below is that decode as it was, one image at a time through the public `batched_nms`."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from lucid_models import BranchOutput, Detections, ModelOutput, make_anchors, nms_decode
from lucid_models import decode as decode_module
from lucid_models.decode import _detections, decode_boxes, decode_rotated
from lucid_models.nms import batched_nms, rotated_fast_nms

SIZES = [(16, 16), (8, 8), (4, 4)]  # a 128 px canvas: 336 anchors


def _reference(
    output: ModelOutput, max_det: int, score: float, iou: float, multi_label: bool
) -> Detections:
    branch = output.one2many
    assert branch is not None
    probs = branch.logits.float().sigmoid()
    points, strides = output.anchor_points, output.anchor_strides
    B = probs.shape[0]
    indices = torch.full((B, max_det), -1, dtype=torch.long)
    kept_scores = torch.zeros((B, max_det))
    kept_labels = torch.full((B, max_det), -1, dtype=torch.long)
    for b in range(B):
        if multi_label:
            anchor, label = (probs[b] > score).nonzero().unbind(1)
            s = probs[b, anchor, label]
        else:
            best, labels = probs[b].max(dim=-1)
            anchor = (best > score).nonzero().squeeze(1)
            s, label = best[anchor], labels[anchor]
        if len(s) > decode_module.MAX_NMS:
            top = s.topk(decode_module.MAX_NMS).indices
            anchor, label, s = anchor[top], label[top], s[top]
        if branch.angles is not None:
            rotated = decode_rotated(
                branch.boxes[b, anchor], branch.angles[b, anchor], points[anchor], strides[anchor]
            )
            keep = rotated_fast_nms(rotated, s, label, iou, max_det)
        else:
            boxes = decode_boxes(branch.boxes[b, anchor], points[anchor], strides[anchor])
            keep = batched_nms(boxes, s, label, iou, max_det)
        n = len(keep)
        indices[b, :n], kept_scores[b, :n], kept_labels[b, :n] = anchor[keep], s[keep], label[keep]
    return _detections(branch, output, indices, kept_scores, kept_labels, indices >= 0)


def _output(seed: int, batch: int, classes: int, rotated: bool) -> ModelOutput:
    g = torch.Generator().manual_seed(seed)
    points, strides = make_anchors(SIZES)
    a = len(points)
    logits = torch.full((batch, a, classes), -12.0)
    for b in range(batch):
        # image 1 has no candidate; the others a few dozen to all anchors, crowded and tied
        k = (0, a, 40, 7)[b % 4] if b else 25
        anchors = torch.randperm(a, generator=g)[:k]
        logits[b, anchors, torch.randint(0, classes, (k,), generator=g)] = (
            torch.randn(k, generator=g) * 3
        ).round(decimals=1)  # ties in score
    boxes = torch.rand(batch, a, 4, generator=g) * 3
    boxes[0, :3] = torch.tensor([float("inf"), 1.0, 1.0, 1.0])  # a non-finite box: the block pass
    branch = BranchOutput(
        boxes=boxes,
        logits=logits,
        angles=torch.rand(batch, a, generator=g) * 3 if rotated else None,
    )
    return ModelOutput(branch, branch, points, strides)


def _same(a: Detections, b: Detections) -> None:
    for name in ("boxes", "scores", "labels", "anchor_indices", "rotated"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if isinstance(x, Tensor):
            assert torch.equal(x, y), name


@pytest.mark.parametrize("multi_label", [False, True])
@pytest.mark.parametrize("rotated", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_batched_nms_path_keeps_the_per_image_decodes_detections(
    seed: int, rotated: bool, multi_label: bool
) -> None:
    output = _output(seed, batch=6, classes=3, rotated=rotated)
    args = (20, 0.001, 0.7 if not rotated else 0.5)
    ours = nms_decode(output, *args, multi_label=multi_label)
    _same(ours, _reference(output, *args, multi_label))


def test_an_image_over_the_candidate_cap_keeps_its_best_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The authors' cap on candidates an image (`MAX_NMS`), lowered here so images pass it."""
    monkeypatch.setattr(decode_module, "MAX_NMS", 30)
    output = _output(2, batch=5, classes=3, rotated=False)
    for multi_label in (False, True):
        ours = nms_decode(output, 20, 0.001, 0.7, multi_label=multi_label)
        _same(ours, _reference(output, 20, 0.001, 0.7, multi_label))
