"""The model's contracts: construction errors, branch independence, priors, layouts, precision."""

from __future__ import annotations

import math

import pytest
import torch

from lucid_models import build_model
from lucid_models.counts import TASKS
from lucid_models.heads import class_bias_prior
from lucid_models.outputs import ModelOutput, Task


def _kwargs(task: Task) -> dict[str, int]:
    return {"num_keypoints": 5} if task == "pose" else {}


def _all_tensors(out: ModelOutput) -> list[torch.Tensor]:
    tensors = [out.anchor_points, out.anchor_strides]
    for branch in (out.one2one, out.one2many):
        if branch is not None:
            tensors += [t for t in vars(branch).values() if t is not None]
    return tensors + [t for t in (out.prototypes, out.semantic_logits) if t is not None]


def test_pose_without_num_keypoints_is_refused() -> None:
    """K belongs to the dataset: there is no default."""
    with pytest.raises(ValueError, match="num_keypoints"):
        build_model("yolo26n", task="pose")


def test_num_keypoints_outside_pose_is_refused() -> None:
    """Keypoints for a detector are a mistake, not something to ignore."""
    with pytest.raises(ValueError, match="pose only"):
        build_model("yolo26n", task="detect", num_keypoints=17)


def test_unknown_task_is_refused() -> None:
    """The task names are a closed set."""
    with pytest.raises(ValueError, match="detect, segment, pose or obb"):
        build_model("yolo26n", task="classify")  # type: ignore[arg-type]


def test_one2one_branch_starts_as_a_copy_with_its_own_parameters(seeded: None) -> None:
    """Same initial values as the one-to-many branch, but no shared storage."""
    head = build_model("yolo26n", task="pose", num_keypoints=3).head
    o2m, o2o = head.one2many.state_dict(), head.one2one.state_dict()
    assert o2m.keys() == o2o.keys()
    for key in o2m:
        torch.testing.assert_close(o2m[key], o2o[key], rtol=0, atol=0)
        if o2m[key].numel():
            assert o2m[key].data_ptr() != o2o[key].data_ptr()


def test_one2one_loss_does_not_reach_the_backbone_or_neck(seeded: None) -> None:
    """The one-to-one branch reads detached features, as in the authors' training."""
    model = build_model("yolo26n", num_classes=3)
    out = model(torch.rand(1, 3, 64, 64))
    (out.one2one.logits.sum() + out.one2one.boxes.sum()).backward()
    assert all(p.grad is None for p in model.backbone.parameters())
    assert all(p.grad is None for p in model.neck.parameters())
    assert all(p.grad is None for p in model.head.one2many.parameters())
    assert all(p.grad is not None for p in model.head.one2one.parameters())


def test_class_bias_prior_and_box_bias_are_the_authors_initial_values(seeded: None) -> None:
    """log(5 / C / (640 / s)^2) on each level's class output; 2.0 on each box output."""
    branch = build_model("yolo26n", num_classes=80).head.one2many
    for stem, stride in zip(branch.cls, (8, 16, 32), strict=True):
        assert stem[-1].bias.unique().tolist() == pytest.approx([class_bias_prior(80, stride)])
    assert class_bias_prior(80, 8) == pytest.approx(math.log(5 / 80 / 6400))
    for stem in branch.box:
        assert stem[-1].bias.unique().tolist() == [2.0]


def test_semantic_logits_exist_in_training_mode_only(seeded: None) -> None:
    """The aux head is keyed on ``training``, not on grad mode."""
    model = build_model("yolo26n", task="segment", num_classes=4)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        assert model.train()(x).semantic_logits is not None
        assert model.eval()(x).semantic_logits is None


@pytest.mark.parametrize("task", TASKS)
def test_channels_last_gives_the_same_outputs(task: Task, seeded: None) -> None:
    """The network is layout-agnostic: channels_last weights and input match NCHW."""
    model = build_model("yolo26n", task=task, num_classes=3, **_kwargs(task)).eval()
    x = torch.rand(1, 3, 96, 64)
    with torch.no_grad():
        ref = _all_tensors(model(x))
        model = model.to(memory_format=torch.channels_last)
        got = _all_tensors(model(x.contiguous(memory_format=torch.channels_last)))
    for a, b in zip(ref, got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("task", TASKS)
def test_forward_and_backward_are_finite_under_cpu_autocast(
    task: Task, dtype: torch.dtype, seeded: None
) -> None:
    """Every output and every gradient is finite under reduced-precision autocast."""
    model = build_model("yolo26n", task=task, num_classes=3, **_kwargs(task)).train()
    with torch.autocast("cpu", dtype=dtype):
        out = model(torch.rand(2, 3, 64, 64))
    tensors = _all_tensors(out)
    assert all(torch.isfinite(t).all() for t in tensors)
    sum(t.float().sum() for t in tensors if t.requires_grad).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.slow
@pytest.mark.any_torch
def test_torch_compile_matches_eager(seeded: None) -> None:
    """The model compiles (default inductor) and its outputs match eager."""
    model = build_model("yolo26n", task="segment", num_classes=3).eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        ref = _all_tensors(model(x))
        got = _all_tensors(torch.compile(model)(x))
    for a, b in zip(ref, got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
