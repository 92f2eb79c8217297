"""A recorder called with keyword arguments replays them as eager passes them, bit for bit.

The keyword names and their constants are part of the recorded call's structure: another set of
keywords, or another constant, runs eager with reason ``arguments``; a keyword tensor is copied
into the recording like a positional one.
"""

from __future__ import annotations

import pytest
import torch

from lucid_capture import NetworkRecorder, Reason
from lucid_testing.capture_models import bitwise_equal, strict_numerics

pytestmark = pytest.mark.gpu


class _MaskedNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(
        self, x: torch.Tensor, *, mask: torch.Tensor | None = None, scale: float = 1.0
    ) -> torch.Tensor:
        y = self.norm(self.proj(x)) * scale
        return y if mask is None else y * mask


# Per step: the keywords of the call, in the order given. The third and fifth change the
# structure or a constant (eager); the fourth gives the same keywords in another order (replayed).
CALLS = [
    {"mask": True, "scale": 0.5},
    {"mask": True, "scale": 0.5},
    {"scale": 0.5},
    {"scale": 0.5, "mask": True},
    {"mask": True, "scale": 2.0},
    {"mask": True, "scale": 0.5},
]


def _fit(capture: bool) -> tuple[list[torch.Tensor], NetworkRecorder | None]:
    with strict_numerics():
        torch.manual_seed(0)
        net = _MaskedNet().cuda()
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2)
        recorder = NetworkRecorder(net) if capture else None
        forward = recorder if recorder is not None else net
        g = torch.Generator().manual_seed(1)
        seen: list[torch.Tensor] = []
        for keywords in CALLS:
            x = torch.randn(4, 8, generator=g).cuda()
            mask = (torch.rand(4, 16, generator=g) > 0.3).float().cuda()
            kwargs = {k: mask if k == "mask" else v for k, v in keywords.items()}
            loss = forward(x, **kwargs).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            seen.append(loss.detach().clone())
        seen += [p.detach().clone() for p in net.parameters()]
        return seen, recorder


def test_keyword_arguments_replay_as_eager_passes_them() -> None:
    eager, _ = _fit(capture=False)
    replay, recorder = _fit(capture=True)
    for i, (a, b) in enumerate(zip(eager, replay, strict=True)):
        assert bitwise_equal(a, b), f"value {i} differs from eager's"
    assert recorder is not None
    assert recorder.stats.replays == 4
    assert recorder.stats.eager == {Reason.ARGUMENTS: 2}
