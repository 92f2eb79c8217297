"""Outputs keep their structure through flatten/rebuild; counters warn once per reason."""

from __future__ import annotations

import warnings
from collections import namedtuple

import pytest
import torch

from lucid_capture import CaptureStats, CaptureWarning, Reason
from lucid_capture.tree import flatten, unflatten
from lucid_testing.capture_models import TwoOutputs

Pair = namedtuple("Pair", "a b")


def test_nested_outputs_round_trip_with_constant_leaves() -> None:
    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    tree = {"out": TwoOutputs(a, b), "extra": [Pair(c, None), "tag", 3]}
    leaves, rebuild = flatten(tree)
    assert [t.shape for t in leaves] == [a.shape, b.shape, c.shape]
    rebuilt = unflatten(rebuild, [t + 1 for t in leaves])
    assert isinstance(rebuilt["out"], TwoOutputs) and isinstance(rebuilt["extra"][0], Pair)
    assert rebuilt["extra"][0].b is None and rebuilt["extra"][1:] == ["tag", 3]
    assert torch.equal(rebuilt["out"].aux, b + 1)
    with pytest.raises(ValueError, match="more tensors"):
        unflatten(rebuild, [*leaves, a])


def test_each_reason_warns_once_and_quiet_reasons_never() -> None:
    stats = CaptureStats("net")
    with pytest.warns(CaptureWarning, match=r"\[net\]: ran eager \(shape\)"):
        stats.count_eager(Reason.SHAPE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats.count_eager(Reason.SHAPE)
        stats.count_eager(Reason.INFERENCE)
    with pytest.warns(CaptureWarning, match="recording retired"):
        stats.retire(Reason.PARAMETERS_SWAPPED)
    assert stats.summary() == (
        "net: 0 recordings, 0 replays, 1 retired, 3 eager (inference: 1, shape: 2)"
    )
    stats.reset()
    assert stats.eager_calls == 0 and stats.retirements == 0


def test_every_reason_has_an_explanation() -> None:
    assert all(reason.explanation for reason in Reason)


def test_description_tells_apart_structures_and_constants_but_not_tensor_values() -> None:
    from lucid_capture.tree import describe

    a = TwoOutputs(torch.zeros(2), torch.ones(3))
    assert describe((a, 1.0)) == describe((TwoOutputs(torch.ones(5), torch.zeros(1)), 1.0))
    assert describe((a, 1.0)) != describe((a, 2.0))
    assert describe((a, None)) != describe((a, torch.zeros(1)))
    assert describe({"x": a}) != describe({"y": a})
