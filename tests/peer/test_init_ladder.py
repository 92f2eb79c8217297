"""A fresh network starts where the authors' does (rung 0, below assignment): the other rungs
load one file into both sides, so they cannot see a difference in how a fit's first weights
are drawn. Here their 8.4.190 model is built from its YAML at test time, as their trainer
builds it, and compared with ours tensor by tensor (their names mapped to ours by the weights
reader): every tensor that is the same for every seed (biases set by rule, BatchNorm's
parameters and statistics) equals theirs exactly, and every drawn tensor has their mean and
spread within its sampling error over a few seeds."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from lucid_models import build_model
from lucid_train.weights.authors_names import lucid_key

SEEDS = (0, 1, 2)
CLASSES = 3
KEYPOINTS = 17
# (their model class, their YAML) per task
AUTHORS = {
    "detect": ("DetectionModel", "yolo26n.yaml"),
    "segment": ("SegmentationModel", "yolo26n-seg.yaml"),
    "pose": ("PoseModel", "yolo26n-pose.yaml"),
    "obb": ("OBBModel", "yolo26n-obb.yaml"),
}


def _theirs(task: str) -> dict[str, torch.Tensor]:
    import ultralytics.nn.tasks as tasks

    name, yaml = AUTHORS[task]
    kw: dict[str, Any] = {"data_kpt_shape": (KEYPOINTS, 3)} if task == "pose" else {}
    model = getattr(tasks, name)(yaml, nc=CLASSES, verbose=False, **kw)
    return dict(model.state_dict())


def _ours(task: str) -> dict[str, torch.Tensor]:
    kw: dict[str, Any] = {"num_keypoints": KEYPOINTS} if task == "pose" else {}
    model = build_model("yolo26n", task=task, num_classes=CLASSES, **kw)  # type: ignore[arg-type]
    return {"model." + k: v for k, v in model.state_dict().items()}


def _draws(make: Any, task: str) -> dict[str, list[torch.Tensor]]:
    out: dict[str, list[torch.Tensor]] = {}
    for seed in SEEDS:
        torch.manual_seed(seed)
        for key, value in make(task).items():
            out.setdefault(key, []).append(value.detach().double())
    return out


@pytest.mark.parametrize("task", list(AUTHORS))
def test_a_fresh_network_is_drawn_as_the_authors_is(task: str) -> None:
    ours, theirs = _draws(_ours, task), _draws(_theirs, task)
    pairs = {}
    for key in theirs:
        mine = lucid_key(key, frozenset(ours))
        if mine is not None:
            pairs[mine] = key
    assert set(pairs) == set(ours), sorted(set(ours) - set(pairs))[:5]
    for mine, key in pairs.items():
        a, b = ours[mine], theirs[key]
        assert a[0].shape == b[0].shape, (mine, a[0].shape, b[0].shape)
        fixed_a = all(torch.equal(a[0], t) for t in a)
        fixed_b = all(torch.equal(b[0], t) for t in b)
        assert fixed_a == fixed_b, (mine, "drawn on one side only")
        if fixed_a:
            assert torch.equal(a[0], b[0]), (mine, a[0].flatten()[:4], b[0].flatten()[:4])
            continue
        xa, xb = torch.stack(a), torch.stack(b)
        n = xa.numel()
        sa, sb = float(xa.std()), float(xb.std())
        # a sample's std and mean move by about 1/sqrt(2n) and 1/sqrt(n) of the spread
        assert abs(sa / sb - 1) < 5 / math.sqrt(2 * n) + 0.01, (mine, sa, sb)
        assert abs(float(xa.mean() - xb.mean())) < 5 * max(sa, sb) / math.sqrt(n), mine
