"""Greedy class-wise NMS against a naive per-box reference, through both of its passes
(torchvision's kernel and our own block pass: `lucid_models.nms`), which keep the same boxes."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from lucid_models import batched_nms, box_iou, nms


def _naive_iou(a: list[float], b: list[float]) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _naive_nms(boxes: Tensor, scores: Tensor, labels: Tensor, threshold: float) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    keep: list[int] = []
    for i in order:
        if all(
            labels[i] != labels[j] or _naive_iou(boxes[i].tolist(), boxes[j].tolist()) <= threshold
            for j in keep
        ):
            keep.append(i)
    return keep


def _random_boxes(n: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 100
    wh = torch.rand(n, 2, generator=g) * 40 + 1
    boxes = torch.cat((xy, xy + wh), 1)
    return boxes, torch.rand(n, generator=g), torch.randint(0, 3, (n,), generator=g)


PASSES = ("kernel", "blocks")


@pytest.fixture(params=PASSES)
def nms_pass(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every call through one pass: torchvision's kernel (any candidate count) or ours."""
    if request.param == "kernel":
        pytest.importorskip("torchvision")
        monkeypatch.setattr(nms, "KERNEL_MAX", {"cpu": 10**9, "cuda": 10**9})
    else:
        monkeypatch.setattr(nms, "KERNEL_MAX", {})
    return str(request.param)


def test_box_iou_matches_the_pairwise_reference() -> None:
    """Every entry of the IoU matrix equals the per-pair formula."""
    boxes, _, _ = _random_boxes(30, 1)
    iou = box_iou(boxes, boxes)
    for i in range(30):
        for j in range(30):
            assert iou[i, j].item() == pytest.approx(
                _naive_iou(boxes[i].tolist(), boxes[j].tolist()), abs=1e-6
            )


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("threshold", [0.3, 0.7])
def test_batched_nms_keeps_what_the_greedy_reference_keeps(
    seed: int, threshold: float, nms_pass: str
) -> None:
    """Same kept indices, same order, for random boxes over three classes."""
    boxes, scores, labels = _random_boxes(200, seed)
    keep = batched_nms(boxes, scores, labels, threshold)
    assert keep.tolist() == _naive_nms(boxes, scores, labels, threshold)


def test_max_keep_truncates_to_the_first_kept_boxes(nms_pass: str) -> None:
    """Stopping early returns a prefix of the unbounded result."""
    boxes, scores, labels = _random_boxes(200, 3)
    full = batched_nms(boxes, scores, labels, 0.5)
    assert batched_nms(boxes, scores, labels, 0.5, max_keep=7).tolist() == full[:7].tolist()


def test_empty_input_gives_empty_keep(nms_pass: str) -> None:
    """No boxes, no indices, int64."""
    keep = batched_nms(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, dtype=torch.long), 0.5)
    assert keep.shape == (0,)
    assert keep.dtype == torch.long


def test_tied_scores_keep_the_lower_index(nms_pass: str) -> None:
    """Two identical boxes with equal scores: the first one is kept, on every device."""
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0]] * 2)
    keep = batched_nms(boxes, torch.tensor([0.5, 0.5]), torch.tensor([0, 0]), 0.5)
    assert keep.tolist() == [0]


def test_inverted_and_empty_boxes_overlap_nothing(nms_pass: str) -> None:
    """Boxes inverted in x or y, or of zero width, neither suppress nor are suppressed: the
    reference's clamped intersection is 0, through either pass."""
    boxes, scores, labels = _random_boxes(200, 5)
    boxes[::5, 2] = boxes[::5, 0] - 3  # inverted in x
    boxes[1::5, 3] = boxes[1::5, 1] - 2  # inverted in y
    boxes[2::5, 2] = boxes[2::5, 0]  # zero width
    keep = batched_nms(boxes, scores, labels, 0.5).tolist()
    assert keep == _naive_nms(boxes, scores, labels, 0.5)
    assert set(range(0, 200, 5)) | set(range(1, 200, 5)) | set(range(2, 200, 5)) <= set(keep)


def test_inverted_boxes_take_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inverted boxes are no reason for the host pass (an early head gives them in most images:
    docs/benchmarks/nms-speed.md); non-finite boxes and a negative threshold still are."""
    tv = pytest.importorskip("torchvision")
    calls: list[int] = []

    def spy(boxes: Tensor, scores: Tensor, threshold: float) -> Tensor:
        calls.append(len(boxes))
        return tv.ops.nms(boxes, scores, threshold)  # type: ignore[no-any-return]

    monkeypatch.setattr(nms, "_kernel", lambda: spy)
    boxes, scores, labels = _random_boxes(50, 6)
    boxes[::3, 2] = boxes[::3, 0] - 4
    batched_nms(boxes, scores, labels, 0.5)
    assert calls == [50]
    batched_nms(boxes, scores, labels, -0.1)
    boxes[7, 1] = float("nan")
    batched_nms(boxes, scores, labels, 0.5)
    assert calls == [50]


def _validation_scene(n: int, classes: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """What NMS gets in validation: boxes jittered around a few objects (heavy overlap), the
    rest anywhere, scores with ties (fp16 logits' sigmoids repeat), many classes."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.rand(12, 2, generator=g) * 300
    pick = torch.randint(0, 12, (n,), generator=g)
    xy = centres[pick] + torch.randn(n, 2, generator=g) * 4
    wh = torch.rand(12, 2, generator=g)[pick] * 60 + 4 + torch.randn(n, 2, generator=g)
    boxes = torch.cat((xy, xy + wh.clamp(min=0.5)), 1)
    scores = (torch.rand(n, generator=g) * 64).floor() / 64  # 64 distinct values: many ties
    return boxes, scores, torch.randint(0, classes, (n,), generator=g)


DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ],
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("classes", [1, 80])
def test_the_kernel_and_the_block_pass_keep_the_same_boxes_in_the_same_order(
    seed: int, classes: int, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dense clusters, tied scores, 300 kept at IoU 0.7 (validation's settings); and the scene
    with every seventh box inverted (an untrained head's raw distances), which both passes
    keep alike: an inverted box overlaps nothing. On CUDA the kernel's own sort is not
    stable: the ranks it is given keep the tie order."""
    pytest.importorskip("torchvision")
    boxes, scores, labels = (t.to(device) for t in _validation_scene(3000, classes, seed))
    inverted = boxes.clone()
    inverted[::7, 2] = inverted[::7, 0] - 5
    kept = {}
    for name, limit in (("kernel", 10**9), ("blocks", 0)):
        monkeypatch.setattr(nms, "KERNEL_MAX", {"cpu": limit, "cuda": limit})
        kept[name] = (
            batched_nms(boxes, scores, labels, 0.7, max_keep=300).tolist(),
            batched_nms(inverted, scores, labels, 0.5).tolist(),
        )
    assert len(kept["blocks"][0]) > 100  # a scene where NMS has work to do
    assert kept["kernel"] == kept["blocks"]
    flipped = set(range(0, len(boxes), 7))
    assert flipped <= set(kept["kernel"][1])  # every inverted box kept, none suppressing


@pytest.mark.parametrize("block", [7, 64])
def test_blocks_of_the_greedy_pass_keep_what_one_pass_keeps(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host pass runs block by block; boxes kept in earlier blocks suppress later ones,
    and ``max_keep`` stops inside a block: the same indices as the reference either way."""
    monkeypatch.setattr(nms, "_BLOCK", block)
    monkeypatch.setattr(nms, "KERNEL_MAX", {})
    boxes, scores, labels = _random_boxes(200, 4)
    reference = _naive_nms(boxes, scores, labels, 0.4)
    assert batched_nms(boxes, scores, labels, 0.4).tolist() == reference
    assert (
        batched_nms(boxes, scores, labels, 0.4, max_keep=block + 3).tolist()
        == (reference[: block + 3])
    )


def _fast_reference(rboxes: Tensor, scores: Tensor, labels: Tensor, thr: float) -> list[int]:
    """Fast-NMS pair by pair: a box goes when any higher-scored box of its class overlaps it."""
    from lucid_models.probiou import probiou

    order = scores.argsort(descending=True, stable=True).tolist()
    kept = []
    for j_pos, j in enumerate(order):
        if not any(
            labels[i] == labels[j] and float(probiou(rboxes[i], rboxes[j])) > thr
            for i in order[:j_pos]
        ):
            kept.append(j)
    return kept


@pytest.mark.parametrize("seed", [0, 1])
def test_rotated_fast_nms_keeps_what_the_pairwise_fast_nms_keeps(seed: int) -> None:
    """Across the 256-row blocks too (300 boxes), and class-wise."""
    from lucid_models import rotated_fast_nms

    g = torch.Generator().manual_seed(seed)
    n = 300
    centres = torch.rand(n, 2, generator=g) * 200
    sizes = torch.rand(n, 2, generator=g) * 40 + 4
    angles = (torch.rand(n, 1, generator=g) - 0.5) * 3.1
    rboxes = torch.cat([centres, sizes, angles], dim=1)
    scores = torch.rand(n, generator=g)
    labels = torch.randint(0, 3, (n,), generator=g)
    kept = rotated_fast_nms(rboxes, scores, labels, 0.5)
    assert kept.tolist() == _fast_reference(rboxes, scores, labels, 0.5)
    assert rotated_fast_nms(rboxes, scores, labels, 0.5, max_keep=7).tolist() == kept[:7].tolist()
    assert rotated_fast_nms(rboxes[:0], scores[:0], labels[:0], 0.5).numel() == 0


def test_a_box_dropped_by_fast_nms_still_drops_the_boxes_it_overlaps() -> None:
    """The authors' Fast-NMS, not greedy: a > b > c in score, a overlaps b, b overlaps c, a and c
    apart. Greedy keeps a and c; Fast-NMS keeps a only."""
    from lucid_models import rotated_fast_nms
    from lucid_models.probiou import probiou

    a = torch.tensor([0.0, 0.0, 20.0, 10.0, 0.0])
    b = torch.tensor([5.0, 0.0, 20.0, 10.0, 0.0])
    c = torch.tensor([10.0, 0.0, 20.0, 10.0, 0.0])
    thr = float(probiou(a, c)) + 0.01  # a-c under it, a-b and b-c over it
    assert float(probiou(a, b)) > thr and float(probiou(b, c)) > thr
    kept = rotated_fast_nms(
        torch.stack([a, b, c]), torch.tensor([0.9, 0.8, 0.7]), torch.zeros(3), thr
    )
    assert kept.tolist() == [0]


def test_rotated_fast_nms_keeps_the_authors_pairs() -> None:
    """The (anchor, class) pairs the authors' obb NMS keeps, in their order, on crowded rotated
    candidates: facts from their 8.4.190 build (`facts/ultralytics_rotated_nms.py`)."""
    import json
    from pathlib import Path

    from lucid_models import rotated_fast_nms

    facts = json.loads(
        (Path(__file__).parent / "facts" / "ultralytics_rotated_nms.json").read_text()
    )
    for case in facts["cases"]:
        rboxes = torch.tensor(case["rboxes"], dtype=torch.float32)
        scores = torch.tensor(case["scores"], dtype=torch.float32)
        anchor, label = (scores > case["conf"]).nonzero().unbind(1)  # multi-label candidates
        keep = rotated_fast_nms(rboxes[anchor], scores[anchor, label], label, case["iou"], 300)
        ours = torch.stack([anchor[keep], label[keep]], dim=1).tolist()
        assert ours == case["kept"]
