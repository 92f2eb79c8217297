"""Warm-up + linear schedule: the authors' value at every step, a pure function of the step."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from lucid_train.optim import MuSGD, WarmupLinear, WarmupLinearLR


def _authors_loop(
    schedule: WarmupLinear, bases: list[float], bias: list[bool]
) -> list[tuple[list[float], float | None]]:
    """Per iteration: what the authors' trainer leaves in each group (lr) and momentum.

    Their LambdaLR steps at each epoch start, then the warm-up overwrites lr and momentum by
    ``numpy.interp`` while ``ni <= nw``.
    """
    nb, epochs = schedule.steps_per_epoch, schedule.epochs
    lrf = schedule.lrf
    nw = round(min(schedule.warmup_epochs, max(epochs - 1, 0)) * nb)
    lrs = list(bases)
    momentum: float | None = None
    out = []
    for epoch in range(epochs):
        factor = max(1 - epoch / epochs, 0) * (1.0 - lrf) + lrf
        lrs = [b * factor for b in bases]
        for i in range(nb):
            ni = i + nb * epoch
            if nw and ni <= nw:
                starts = [schedule.warmup_bias_lr if is_bias else 0.0 for is_bias in bias]
                lrs = [
                    float(np.interp(ni, [0, nw], [s, b * factor]))
                    for s, b in zip(starts, bases, strict=True)
                ]
                momentum = float(
                    np.interp(ni, [0, nw], [schedule.warmup_momentum, schedule.momentum])
                )
            out.append((list(lrs), momentum))
    return out


@pytest.mark.parametrize(
    ("steps_per_epoch", "epochs", "warmup_epochs"),
    [(7, 5, 3.0), (10, 2, 3.0), (3, 12, 0.5), (5, 1, 3.0), (9, 4, 0.0)],
)
def test_every_step_equals_the_authors_value(
    steps_per_epoch: int, epochs: int, warmup_epochs: float
) -> None:
    schedule = WarmupLinear(steps_per_epoch, epochs, warmup_epochs=warmup_epochs)
    bases, bias = [0.01 * 3, 0.01, 0.01 * 3, 0.01], [True, True, False, False]
    reference = _authors_loop(schedule, bases, bias)
    for step, (lrs, momentum) in enumerate(reference):
        ours = [schedule.lr(step, b, bias=is_bias) for b, is_bias in zip(bases, bias, strict=True)]
        assert ours == lrs, step  # bit for bit
        assert schedule.momentum_at(step) == momentum, step


def test_values_at_warmup_start_end_and_epoch_boundaries() -> None:
    schedule = WarmupLinear(steps_per_epoch=10, epochs=100)  # warm-up 30 steps
    assert schedule.warmup_steps == 30
    assert schedule.lr(0, 0.01, bias=True) == 0.1
    assert schedule.lr(0, 0.01) == 0.0
    assert schedule.momentum_at(0) == 0.8
    assert schedule.lr(15, 0.01) == pytest.approx(0.5 * 0.01 * schedule.epoch_factor(1))
    end = 0.01 * schedule.epoch_factor(3)
    assert schedule.lr(30, 0.01) == end and schedule.lr(30, 0.01, bias=True) == end
    assert schedule.momentum_at(30) == 0.937 and schedule.momentum_at(31) == 0.937
    assert schedule.lr(39, 0.01) == end  # constant to the epoch's end
    assert schedule.lr(40, 0.01) == 0.01 * schedule.epoch_factor(4)
    assert schedule.lr(999, 0.01) == pytest.approx(0.01 * (1 / 100 * 0.99 + 0.01))  # last epoch
    assert schedule.epoch_factor(0) == 1.0 and schedule.epoch_factor(100) == 0.01
    assert schedule.epoch_factor(150) == 0.01


def test_warmup_length_rule() -> None:
    assert WarmupLinear(10, 2).warmup_steps == 10  # never the last epoch
    assert WarmupLinear(10, 1).warmup_steps == 0
    assert WarmupLinear(5, 10, warmup_epochs=0.5).warmup_steps == 2  # round half to even
    assert WarmupLinear(1, 10).warmup_steps == 3  # no 100-step minimum
    assert WarmupLinear(10, 10).momentum_at(5) is not None
    assert WarmupLinear(10, 1).momentum_at(5) is None  # no warm-up: momentum left alone
    with pytest.raises(ValueError):
        WarmupLinear(0, 10)


def _optimizer() -> MuSGD:
    groups: list[dict[str, Any]] = [
        {"params": [nn.Parameter(torch.ones(2, 2))], "use_muon": True, "lr": 0.03},
        {"params": [nn.Parameter(torch.ones(2))], "param_group": "bias"},
        {"params": [nn.Parameter(torch.ones(2))], "param_group": "bn"},
    ]
    return MuSGD(groups, lr=0.01, momentum=0.9)


def test_scheduler_drives_groups_once_per_optimizer_step() -> None:
    schedule = WarmupLinear(steps_per_epoch=4, epochs=3)
    opt = _optimizer()
    sched = WarmupLinearLR(opt, schedule)
    for step in range(12):
        expected = [
            schedule.lr(step, 0.03),
            schedule.lr(step, 0.01, bias=True),
            schedule.lr(step, 0.01),
        ]
        assert [g["lr"] for g in opt.param_groups] == expected
        assert all(g["momentum"] == schedule.momentum_at(step) for g in opt.param_groups)
        opt.step()
        sched.step()


def test_scheduler_state_resumes_exactly_and_loads_weights_only() -> None:
    schedule = WarmupLinear(steps_per_epoch=4, epochs=3)
    opt = _optimizer()
    sched = WarmupLinearLR(opt, schedule)
    for _ in range(5):
        opt.step()
        sched.step()
    buffer = io.BytesIO()
    torch.save({"opt": opt.state_dict(), "sched": sched.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)

    opt2 = _optimizer()
    sched2 = WarmupLinearLR(opt2, WarmupLinear(steps_per_epoch=99, epochs=99))
    opt2.load_state_dict(saved["opt"])
    sched2.load_state_dict(saved["sched"])
    assert sched2.schedule == schedule and sched2.last_epoch == 5
    for _ in range(6):
        opt.step()
        sched.step()
        opt2.step()
        sched2.step()
        assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in opt2.param_groups]
        assert [g["momentum"] for g in opt.param_groups] == [
            g["momentum"] for g in opt2.param_groups
        ]
