"""Parameter groups: the authors' split, the 3x class branches, the nominal-batch weight decay."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lucid_models import build_model
from lucid_train.optim import (
    MuSGD,
    boosted_parameters,
    nominal_accumulation,
    param_groups,
    scaled_weight_decay,
)

# Group sizes of the authors' MuSGD build_optimizer on their yolo26n builds (Ultralytics 8.4.190,
# nc=3), as (group, boosted) -> parameter count. Their pose head also holds the RLE flow (36
# weights, 36 biases), which our model leaves to the loss, so pose is not compared.
AUTHORS_GROUP_SIZES = {
    "detect": {
        ("bias", False): 96, ("bias", True): 30, ("bn", False): 90,
        ("bn", True): 24, ("muon", False): 96, ("muon", True): 30,
    },
    "segment": {
        ("bias", False): 121, ("bias", True): 33, ("bn", False): 108,
        ("bn", True): 26, ("muon", False): 121, ("muon", True): 33,
    },
    "obb": {
        ("bias", False): 114, ("bias", True): 30, ("bn", False): 102,
        ("bn", True): 24, ("muon", False): 114, ("muon", True): 30,
    },
}  # fmt: skip


@pytest.mark.parametrize("task", sorted(AUTHORS_GROUP_SIZES))
def test_group_sizes_match_the_authors_build(task: str) -> None:
    model = build_model("yolo26n", task=task, num_classes=3)  # type: ignore[arg-type]
    groups = param_groups(model, lr=0.01, batch_size=64, accumulate=1)
    sizes = {(g["param_group"], g["lr"] == 0.01 * 3): len(g["params"]) for g in groups}
    assert sizes == AUTHORS_GROUP_SIZES[task]


def test_every_trainable_parameter_in_exactly_one_group_by_the_authors_rules() -> None:
    model = build_model("yolo26n", task="segment", num_classes=3)
    groups = param_groups(model, lr=0.01, weight_decay=5e-4, batch_size=16, accumulate=4)
    names = {id(p): n for n, p in model.named_parameters()}
    placed = [id(p) for g in groups for p in g["params"]]
    assert sorted(placed) == sorted(names) and len(set(placed)) == len(placed)
    boosted = boosted_parameters(model)
    for g in groups:
        for p in g["params"]:
            name = names[id(p)]
            fast = ".cls." in name or name.startswith("head.semantic.")
            assert (id(p) in boosted) == fast, name
            assert g["lr"] == (0.01 * 3 if fast else 0.01), name
            kind = g["param_group"]
            if p.ndim in (2, 4):
                assert kind == "muon" and g["use_muon"], name
            elif name.endswith("bias"):
                assert kind == "bias", name
            else:
                assert kind == "bn" and ".bn." in name, name
            assert g["weight_decay"] == (5e-4 if kind in ("muon", "weight") else 0.0)
    MuSGD(groups)  # the groups are valid MuSGD groups


def test_without_muon_three_groups_and_no_boost() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Linear(4, 2))
    groups = param_groups(model, lr=0.02, batch_size=64, accumulate=1, use_muon=False)
    assert [g["param_group"] for g in groups] == ["weight", "bn", "bias"]
    assert all(g["lr"] == 0.02 and not g["use_muon"] for g in groups)
    assert [len(g["params"]) for g in groups] == [2, 1, 3]
    torch.optim.AdamW(groups, lr=0.02)  # usable by other optimizers too


def test_frozen_and_shared_parameters() -> None:
    shared = nn.Linear(3, 3)
    model = nn.Sequential(shared, nn.ReLU(), shared, nn.Linear(3, 1))
    model[3].weight.requires_grad_(False)
    groups = param_groups(model, batch_size=64, accumulate=1)
    placed = [p for g in groups for p in g["params"]]
    assert len(placed) == 3  # shared weight and bias once, frozen weight left out
    assert all(p.requires_grad for p in placed)


def test_nominal_batch_arithmetic() -> None:
    assert [nominal_accumulation(b) for b in (1, 8, 16, 24, 64, 128)] == [64, 8, 4, 3, 1, 1]
    assert scaled_weight_decay(5e-4, 16, 4) == 5e-4
    assert scaled_weight_decay(5e-4, 16, 1) == 5e-4 * 16 / 64
    assert scaled_weight_decay(5e-4, 24, 3) == 5e-4 * 72 / 64
    with pytest.raises(ValueError):
        nominal_accumulation(0)


@pytest.mark.parametrize("name", ["AdamW", "SGD"])
def test_torch_optimizers_say_their_implementation_per_device(name: str) -> None:
    from lucid_train.tasks.recipe import OptimizerChoice, OptimizerConfig, build_optimizer

    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    choice = OptimizerChoice(name, 0.01, 0.9)  # type: ignore[arg-type]
    opt = build_optimizer(net, OptimizerConfig(), choice, batch_size=16, accumulate=4)
    # the CPU keeps torch's per-tensor loop (the goldens' arithmetic); CUDA: fused AdamW and
    # foreach SGD (T66), held by test_host_syncs_gpu.py
    assert opt.defaults["foreach"] is False and not opt.defaults.get("fused")
