"""The deploy view: shared parameters, only what inference reads, same one-to-one outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lucid_models import build_model
from lucid_models.counts import TASKS
from lucid_models.outputs import Task


def _kwargs(task: Task) -> dict[str, int]:
    return {"num_keypoints": 4} if task == "pose" else {}


@pytest.mark.parametrize("task", TASKS)
def test_deploy_view_shares_the_trained_parameters(task: Task, seeded: None) -> None:
    """Every deploy parameter *is* a parameter of the trained model (same object)."""
    model = build_model("yolo26n", task=task, num_classes=3, **_kwargs(task))
    trained = {id(p) for p in model.parameters()}
    assert all(id(p) in trained for p in model.deploy().parameters())


@pytest.mark.parametrize("task", TASKS)
def test_deploy_view_holds_no_training_only_part(task: Task, seeded: None) -> None:
    """No one-to-many branch, no semantic head, no keypoint sigma: absent, not disabled."""
    names = list(
        build_model("yolo26n", task=task, num_classes=3, **_kwargs(task)).deploy().state_dict()
    )
    assert not any(n.startswith(("one2many", "semantic")) or "keypoint_sigma" in n for n in names)
    assert any(n.startswith("one2one.") for n in names)
    assert any(n.startswith("prototypes.") for n in names) == (task == "segment")


@pytest.mark.parametrize("task", TASKS)
def test_deploy_view_reproduces_the_one2one_outputs(task: Task, seeded: None) -> None:
    """In eval mode the view's outputs are the full model's one-to-one outputs, bit for bit."""
    model = build_model("yolo26n", task=task, num_classes=3, **_kwargs(task)).eval()
    x = torch.rand(1, 3, 64, 96)
    with torch.no_grad():
        full, view = model(x), model.deploy()(x)
    assert view.one2many is None
    assert view.semantic_logits is None
    assert view.one2one.keypoint_sigmas is None
    for name in ("boxes", "logits", "mask_coefficients", "angles", "keypoints"):
        a, b = getattr(full.one2one, name), getattr(view.one2one, name)
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b), name
    if task == "segment":
        assert full.prototypes is not None
        assert view.prototypes is not None
        assert torch.equal(full.prototypes, view.prototypes)
    assert torch.equal(full.anchor_points, view.anchor_points)


def test_the_deploy_view_needs_nothing_of_the_model_module() -> None:
    """``model`` builds the view from its parts; ``deploy`` imports nothing of ``model`` (not even
    for typing), so the two modules do not import each other."""
    import ast

    import lucid_models.deploy

    tree = ast.parse(Path(lucid_models.deploy.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "lucid_models.model" not in imported, imported
