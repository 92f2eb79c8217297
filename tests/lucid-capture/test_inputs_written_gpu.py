"""A forward that writes into its inputs in place leaves them as eager does, bit for bit.

A replay copies each live input into the recording's own buffer before the graph runs, so a
write the forward makes lands in that buffer. The recorder sees the write at the first warm-up
forward (the input's version counter) and copies the buffer back into the caller's tensor after
each replay. An input that requires grad and is written under ``no_grad`` runs eager instead.
"""

from __future__ import annotations

import pytest
import torch

from lucid_capture import NetworkRecorder, Reason
from lucid_testing.capture_models import bitwise_equal, strict_numerics

pytestmark = pytest.mark.gpu


class _ScalesItsInput(torch.nn.Module):
    """Normalises its input in place, then convolves: the caller reads the scaled input after."""

    def __init__(self, *, quiet: bool = False) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.quiet = quiet

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quiet:
            with torch.no_grad():
                x.mul_(0.5).clamp_(-1.0, 1.0)
        else:
            x.mul_(0.5).clamp_(-1.0, 1.0)
        return self.bn(self.conv(x)).relu()


def _fit(
    capture: bool, *, inputs_require_grad: bool = False
) -> tuple[list[torch.Tensor], dict[str, torch.Tensor], NetworkRecorder | None]:
    """Five steps; what each call left in its input, and the weights and buffers at the end."""
    with strict_numerics():
        torch.manual_seed(0)
        model = _ScalesItsInput(quiet=inputs_require_grad).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        recorder = NetworkRecorder(model) if capture else None
        forward = recorder if recorder is not None else model
        g = torch.Generator().manual_seed(1)
        seen: list[torch.Tensor] = []
        for _ in range(5):
            x = (torch.randn(4, 3, 16, 16, generator=g) * 3).cuda()
            if inputs_require_grad:
                x.requires_grad_(True)
            out = forward(x)
            loss = out.square().mean() + x.sum() * 1e-3  # reads the input after the forward
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            seen.append(x.detach().clone())
            if inputs_require_grad:
                assert x.grad is not None
                seen.append(x.grad.clone())
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return seen, state, recorder


def _assert_same(eager: tuple, replay: tuple) -> None:
    for i, (a, b) in enumerate(zip(eager[0], replay[0], strict=True)):
        assert bitwise_equal(a, b), f"call {i}: the input (or its gradient) differs from eager's"
    for key, value in eager[1].items():
        assert bitwise_equal(value, replay[1][key]), f"{key} differs from eager's"


def test_an_input_written_in_place_is_left_as_eager_leaves_it_after_each_replay() -> None:
    eager = _fit(capture=False)
    replay = _fit(capture=True)
    _assert_same(eager, replay)
    recorder = replay[2]
    assert recorder is not None
    assert recorder.stats.replays == 5 and not recorder.stats.eager


def test_an_input_that_requires_grad_written_under_no_grad_runs_eager_and_says_why() -> None:
    eager = _fit(capture=False, inputs_require_grad=True)
    with pytest.warns(Warning, match="writes a grad input"):
        replay = _fit(capture=True, inputs_require_grad=True)
    _assert_same(eager, replay)
    recorder = replay[2]
    assert recorder is not None
    assert recorder.stats.replays == 0
    assert recorder.stats.eager == {Reason.WRITES_GRAD_INPUT: 5}
