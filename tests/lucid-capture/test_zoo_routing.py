"""What the zoo relies on that holds without CUDA: a capture's refusals map to named reason codes
with fixes, host generators are snapshotted and restored whole, hooks are seen, and a third-party
model through the recorder trains exactly as eager on the CPU (every call ``no CUDA``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from torch import nn

from lucid_capture import Reason
from lucid_capture.failures import (
    HostRandomnessError,
    caller_line,
    failure_reason,
    host_rng_state,
    internal,
    set_host_rng_state,
)
from lucid_capture.network import hooked

# The texts torch 2.11 and the CUDA runtime raise for work a capture refuses.
REFUSALS = {
    "CUDA error: operation not permitted when stream is capturing": Reason.HOST_SYNC,
    "Cannot synchronize during CUDA graph capture. If you need this call to be captured, "
    "please file an issue.": Reason.HOST_SYNC,
    "Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor "
    "is pinned.": Reason.CPU_TENSOR,
    "Attempt to increase offset for a CUDA generator not in capture mode.": Reason.UNREGISTERED_RNG,
    "CUDA out of memory. Tried to allocate 2.00 GiB": Reason.CAPTURE_FAILED,
}


@pytest.mark.parametrize(("text", "reason"), REFUSALS.items())
def test_a_refused_capture_is_named_by_its_cause(text: str, reason: Reason) -> None:
    assert failure_reason(RuntimeError(text)) is reason


@pytest.mark.parametrize(("text", "reason"), REFUSALS.items())
def test_the_cause_is_read_under_the_error_a_capture_raises_at_its_end(
    text: str, reason: Reason
) -> None:
    """A CUDA call that fails under capture invalidates it, and ``capture_end`` raises again
    over the error that named the cause (``__context__``)."""
    outer = RuntimeError("CUDA error: operation failed due to a previous error during capture")
    outer.__context__ = RuntimeError(text)
    expected = Reason.HOST_SYNC if reason is Reason.CAPTURE_FAILED else reason
    assert failure_reason(outer) is expected


def test_a_host_draw_is_named_host_rng() -> None:
    assert failure_reason(HostRandomnessError("drew")) is Reason.HOST_RNG


def test_every_refusal_code_says_how_to_fix_it() -> None:
    codes = [Reason.HOST_SYNC, Reason.CPU_TENSOR, Reason.HOST_RNG, Reason.UNREGISTERED_RNG]
    for reason in [*codes, Reason.HOOKS, Reason.SHAPE, Reason.CAPTURE_FAILED]:
        assert reason.explanation and reason.fix, reason
    assert not Reason.INFERENCE.fix  # eager is the intended route there


def _users_model(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("CUDA error: operation not permitted when stream is capturing")


def test_the_line_that_refused_is_the_users() -> None:
    try:
        _users_model(torch.ones(1))
    except RuntimeError as error:
        where = caller_line(error)
    assert where.endswith("in _users_model") and __file__ in where


def test_a_library_beside_torch_is_the_users_code_not_torchs() -> None:
    torch_dir = Path(torch.__file__).parent
    assert internal(str(torch_dir / "nn" / "modules" / "conv.py"))
    assert not internal(str(torch_dir) + "vision/models/detection/transform.py")


def test_host_generators_are_snapshotted_and_restored_whole() -> None:
    np = pytest.importorskip("numpy")
    before = host_rng_state()
    for draw in (lambda: torch.rand(()), random.random, np.random.rand):
        draw()
        assert host_rng_state() != before, draw
        set_host_rng_state(before)
        assert host_rng_state() == before
    expected = (float(torch.rand(())), random.random(), float(np.random.rand()))
    set_host_rng_state(before)
    assert (float(torch.rand(())), random.random(), float(np.random.rand())) == expected


def test_hooks_inside_the_network_are_seen() -> None:
    net = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))
    assert not hooked(net)
    handle = net[1][1].register_forward_hook(lambda *a: None)
    assert hooked(net)
    handle.remove()
    handle = net[0].register_full_backward_hook(lambda *a: None)
    assert hooked(net)
    handle.remove()
    handle = nn.modules.module.register_module_forward_pre_hook(lambda *a: None)
    try:
        assert hooked(net)
    finally:
        handle.remove()
    assert not hooked(net)


def test_a_torchvision_model_through_the_recorder_trains_as_eager_on_cpu() -> None:
    pytest.importorskip("torchvision")
    from lucid_testing.zoo import ZOO, differences, train

    entry = ZOO["mobilenet_v3_small"]  # BatchNorm, dropout, squeeze-excite
    eager = train(entry, capture=False, device="cpu", sizes=[4, 4, 3], accumulate=2)
    with pytest.warns(UserWarning, match=r"no CUDA"):
        replay = train(entry, capture=True, device="cpu", sizes=[4, 4, 3], accumulate=2)
    assert differences(eager, replay) == []
    assert replay.eager == {Reason.NO_CUDA.value: 3} and replay.replays == 0
