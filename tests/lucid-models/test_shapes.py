"""Output shapes of every task at every scale, square and non-square, on fake tensors."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from lucid_models import YOLO26, build_model
from lucid_models.counts import TASKS
from lucid_models.outputs import Task

SIZES = [(640, 640), (384, 544)]
SLOW_SCALES = {"yolo26m", "yolo26l", "yolo26x"}
NAMES = [
    pytest.param(n, marks=[pytest.mark.slow, pytest.mark.any_torch]) if n in SLOW_SCALES else n
    for n in ("yolo26n", "yolo26s", "yolo26m", "yolo26l", "yolo26x")
]


def _anchors(h: int, w: int) -> int:
    return sum(math.ceil(h / s) * math.ceil(w / s) for s in (8, 16, 32))


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", NAMES)
def test_every_task_and_scale_gives_documented_shapes(
    name: str, task: Task, shape_only_model: Callable[..., YOLO26]
) -> None:
    """Per-anchor tensors are ``(B, A, ...)``, prototypes at stride 4, semantic at stride 8."""
    model = shape_only_model(name, task, num_classes=7)
    for (H, W), training in zip(SIZES, (True, False), strict=True):
        A = _anchors(H, W)
        model.train(training)
        with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
            out = model(torch.zeros(2, 3, H, W))
        assert out.one2many is not None
        for branch in (out.one2one, out.one2many):
            assert tuple(branch.boxes.shape) == (2, A, 4)
            assert tuple(branch.logits.shape) == (2, A, 7)
            if task == "segment":
                assert branch.mask_coefficients is not None
                assert tuple(branch.mask_coefficients.shape) == (2, A, 32)
            if task == "obb":
                assert branch.angles is not None
                assert tuple(branch.angles.shape) == (2, A)
            if task == "pose":
                assert branch.keypoints is not None
                assert branch.keypoint_sigmas is not None
                assert tuple(branch.keypoints.shape) == (2, A, 17, 3)
                assert tuple(branch.keypoint_sigmas.shape) == (2, A, 17, 2)
        assert tuple(out.anchor_points.shape) == (A, 2)
        assert tuple(out.anchor_strides.shape) == (A, 1)
        if task == "segment":
            assert out.prototypes is not None
            assert tuple(out.prototypes.shape) == (2, 32, H // 4, W // 4)
            if training:
                assert out.semantic_logits is not None
                assert tuple(out.semantic_logits.shape) == (2, 7, H // 8, W // 8)
            else:
                assert out.semantic_logits is None
        else:
            assert out.prototypes is None
            assert out.semantic_logits is None


def test_640_input_has_8400_anchors_on_a_real_forward(seeded: None) -> None:
    """The real (not fake) forward of yolo26n at 640 gives A = 8400 rows, all finite."""
    model = build_model("yolo26n").eval()
    with torch.no_grad():
        out = model(torch.rand(1, 3, 640, 640))
    assert out.one2one.boxes.shape == (1, 8400, 4)
    assert torch.isfinite(out.one2one.logits).all()


def test_sides_that_are_not_multiples_of_32_still_line_up(seeded: None) -> None:
    """Odd sizes resize the upsampled maps to the lateral map, so every level lines up."""
    model = build_model("yolo26n", task="segment").eval()
    with torch.no_grad():
        out = model(torch.rand(1, 3, 100, 75))
    assert out.one2one.boxes.shape == (1, _anchors(100, 75), 4)
    assert out.prototypes is not None
    assert out.prototypes.shape[-2:] == (26, 20)
