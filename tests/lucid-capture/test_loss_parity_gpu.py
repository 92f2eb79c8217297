"""Loss replay on padded targets: the same bits as the padded eager route, over capacity eager."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from lucid_capture import LossRecorder, NetworkRecorder, Reason
from lucid_testing.capture_models import bitwise_equal, strict_numerics
from lucid_testing.padded_loss import pad, padded_detection_loss

pytestmark = pytest.mark.gpu
ANCHORS, CLASSES, CAPACITY = 64, 3, 6


class Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.SiLU())
        self.box = torch.nn.Linear(32, 4)
        self.cls = torch.nn.Linear(32, CLASSES)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(x)
        return self.box(h), self.cls(h)


def _targets(counts: list[int], seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    boxes = [torch.rand(n, 4, generator=g) for n in counts]
    labels = [torch.randint(0, CLASSES, (n,), generator=g) for n in counts]
    return boxes, labels


def _args(counts: list[int], seed: int, rows: int) -> list[torch.Tensor]:
    boxes, labels = _targets(counts, seed)
    gt_boxes, mask = pad([b.cuda() for b in boxes], rows)
    gt_labels, _ = pad([lab.cuda() for lab in labels], rows)
    return [gt_boxes, gt_labels, mask]


STEPS = [  # per-image target counts: an empty image, a full one, and an over-capacity batch
    [2, 0, 6, 1],
    [3, 3, 0, 0],
    [9, 1, 2, 2],  # 9 > capacity: padded to 9 rows, runs eager
    [1, 2, 3, 4],
]


def run(
    capture: bool, precision: torch.dtype | None, weight: float = 7.5
) -> tuple[list[Any], Any, Any]:
    with strict_numerics():
        torch.manual_seed(0)
        head = Head().cuda()
        optimizer = torch.optim.SGD(head.parameters(), lr=0.1, momentum=0.9)
        network = NetworkRecorder(head) if capture else head
        loss_fn = (
            LossRecorder(padded_detection_loss, capacity=CAPACITY, targets=(2, 3, 4))
            if capture
            else padded_detection_loss
        )
        g = torch.Generator().manual_seed(1)
        box_weight = torch.tensor(weight, device="cuda")
        record: list[Any] = []
        for step, counts in enumerate(STEPS):
            x = torch.randn(len(counts), ANCHORS, 8, generator=g).cuda()
            rows = max(CAPACITY, max(counts))
            ctx = (
                torch.autocast("cuda", dtype=precision)
                if precision
                else torch.autocast("cuda", enabled=False)
            )
            with ctx:
                boxes, logits = network(x)
                loss, parts = loss_fn(boxes, logits, *_args(counts, step, rows), box_weight)
            loss.backward()
            record += [loss.detach().clone(), parts.clone()]
            record += [p.grad.clone() for p in head.parameters() if p.grad is not None]
            optimizer.step()
            optimizer.zero_grad()
        record += [p.detach().clone() for p in head.parameters()]
        return record, network, loss_fn


@pytest.mark.parametrize(
    "precision", [None, torch.float16, torch.bfloat16], ids=["32-true", "16-mixed", "bf16-mixed"]
)
def test_network_and_loss_replay_match_the_padded_eager_route(
    precision: torch.dtype | None,
) -> None:
    eager, _, _ = run(capture=False, precision=precision)
    replay, network, loss = run(capture=True, precision=precision)
    assert len(eager) == len(replay)
    for i, (a, b) in enumerate(zip(eager, replay, strict=True)):
        assert bitwise_equal(a, b), f"item {i} differs"
    assert loss.stats.recordings == 1 and loss.stats.replays == 3
    assert loss.stats.eager == {Reason.OVER_CAPACITY: 1}
    assert network.stats.replays == 4


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("where", ["weight", "prediction"])
def test_non_finite_inputs_give_the_same_bits_on_both_routes(where: str, value: float) -> None:
    with strict_numerics():
        g = torch.Generator().manual_seed(5)
        boxes = torch.randn(4, ANCHORS, 4, generator=g).cuda().requires_grad_()
        logits = torch.randn(4, ANCHORS, CLASSES, generator=g).cuda().requires_grad_()
        weight = torch.tensor(7.5, device="cuda")
        if where == "weight":
            weight.fill_(value)
        recorder = LossRecorder(padded_detection_loss, capacity=CAPACITY, targets=(2, 3, 4))
        results = []
        for route in ("record", "replay", "eager"):
            b = boxes.detach().clone().requires_grad_()
            lg = logits.detach().clone().requires_grad_()
            if where == "prediction" and route != "record":
                with torch.no_grad():
                    b[1, 3, 0] = value
            targets = _args([2, 0, 6, 1], 0, CAPACITY)
            fn = padded_detection_loss if route == "eager" else recorder
            loss, parts = fn(b, lg, *targets, weight)
            loss.backward()
            results.append([loss.detach(), parts, b.grad, lg.grad])
        for a, b in zip(results[2], results[1], strict=True):
            assert bitwise_equal(a, b)
        assert recorder.stats.replays == 2


def test_python_number_argument_is_baked_in_and_a_new_value_runs_eager() -> None:
    def scaled(x: torch.Tensor, t: torch.Tensor, factor: float) -> torch.Tensor:
        return (x * factor - t).square().sum()

    recorder = LossRecorder(scaled, capacity=4, targets=(1,))
    x = torch.randn(2, 4, device="cuda", requires_grad=True)
    t = torch.zeros(2, 4, device="cuda")
    assert bitwise_equal(recorder(x, t, 2.0), scaled(x, t, 2.0))
    assert bitwise_equal(recorder(x, t, 3.0), scaled(x, t, 3.0))
    assert recorder.stats.eager == {Reason.ARGUMENTS: 1}


def test_arguments_nested_in_a_dataclass_replay_and_a_changed_constant_runs_eager() -> None:
    from dataclasses import dataclass

    @dataclass
    class Padded:
        boxes: torch.Tensor
        mask: torch.Tensor
        note: str = "padded"

    def loss(pred: torch.Tensor, t: Padded, weight: torch.Tensor) -> torch.Tensor:
        diff = (pred[:, :, None] - t.boxes[:, None]).abs().sum(-1)
        return weight * diff.masked_fill(~t.mask[:, None], 0.0).mean()

    recorder = LossRecorder(loss, capacity=3, rows=lambda args: int(args[1].boxes.shape[1]))
    g = torch.Generator().manual_seed(2)
    weight = torch.tensor(2.0, device="cuda")
    for step in range(3):
        pred = torch.randn(2, 5, 4, generator=g).cuda().requires_grad_()
        t = Padded(
            torch.rand(2, 3, 4, generator=g).cuda(), torch.rand(2, 3, generator=g).cuda() > 0.3
        )
        twin = pred.detach().clone().requires_grad_()
        got, want = recorder(pred, t, weight), loss(twin, t, weight)
        got.backward()
        want.backward()
        assert bitwise_equal(got, want) and bitwise_equal(pred.grad, twin.grad), step
    other = Padded(t.boxes, t.mask, note="other")
    assert bitwise_equal(recorder(pred.detach(), other, weight), loss(pred.detach(), other, weight))
    assert recorder.stats.replays == 3
    assert recorder.stats.eager == {Reason.ARGUMENTS: 1}
