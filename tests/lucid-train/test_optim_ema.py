"""ModelEMA: effective decay, float state averaged, integer state copied, exact swap and resume."""

from __future__ import annotations

import io
import math

import pytest
import torch
from torch import nn

from lucid_train.optim import ModelEMA


def _net() -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(16, 2))


def _perturb(net: nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=gen))
    net.train()
    net(torch.randn(2, 3, 4, 4, generator=gen))  # moves BatchNorm statistics and its counter


def test_effective_decay_ramps_to_decay() -> None:
    ema = ModelEMA(_net())
    assert ema.decay_at(1) == 0.9999 * (1 - math.exp(-1 / 2000))
    assert ema.decay_at(2000) == pytest.approx(0.9999 * (1 - math.exp(-1)))
    assert ema.decay_at(10**6) == pytest.approx(0.9999)
    assert ModelEMA(_net(), decay=0.5, tau=1.0).decay_at(0) == 0.0


def test_update_is_a_lerp_with_the_effective_decay() -> None:
    net = _net()
    ema = ModelEMA(net, decay=0.9, tau=3.0)
    start = {k: v.clone() for k, v in ema.shadow.items()}
    _perturb(net, 1)
    ema.update(net)
    ema.update(net)
    live = net.state_dict()
    d1, d2 = ema.decay_at(1), ema.decay_at(2)
    assert ema.updates == 2
    for name, value in ema.shadow.items():
        if value.is_floating_point():
            once = torch.lerp(start[name], live[name], 1 - d1)
            torch.testing.assert_close(value, torch.lerp(once, live[name], 1 - d2))
        else:  # num_batches_tracked follows the model
            assert torch.equal(value, live[name])
    assert ema.shadow["1.running_mean"].abs().sum() > 0  # float buffers are averaged too


def test_swap_in_and_out_restores_the_live_state_bitwise() -> None:
    net = _net()
    ema = ModelEMA(net)
    _perturb(net, 2)
    ema.update(net)
    _perturb(net, 3)
    live = {k: v.clone() for k, v in net.state_dict().items()}
    params = [id(p) for p in net.parameters()]
    with ema.swapped_into(net):
        for name, value in net.state_dict().items():
            assert torch.equal(value, ema.shadow[name])
    assert all(torch.equal(v, live[k]) for k, v in net.state_dict().items())
    assert [id(p) for p in net.parameters()] == params  # same tensors, not replaced

    with pytest.raises(RuntimeError, match="boom"), ema.swapped_into(net):
        raise RuntimeError("boom")
    assert all(torch.equal(v, live[k]) for k, v in net.state_dict().items())


def test_state_dict_round_trip_keeps_the_update_count() -> None:
    net = _net()
    ema = ModelEMA(net)
    for seed in range(3):
        _perturb(net, seed)
        ema.update(net)
    buffer = io.BytesIO()
    torch.save(ema.state_dict(), buffer)
    buffer.seek(0)
    restored = ModelEMA(_net())
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert restored.updates == 3
    _perturb(net, 9)
    ema.update(net)
    restored.update(net)
    assert all(torch.equal(ema.shadow[k], restored.shadow[k]) for k in ema.shadow)


def test_mismatched_state_is_refused() -> None:
    ema = ModelEMA(_net())
    with pytest.raises(KeyError):
        ema.update(nn.Linear(2, 2))


def test_multi_tensor_update_equals_the_per_tensor_update_bitwise() -> None:
    net = _net()
    ema = ModelEMA(net, decay=0.9, tau=3.0)
    reference = {k: v.clone() for k, v in ema.shadow.items()}
    for step in (1, 2, 3):
        _perturb(net, step)
        ema.update(net)
        weight = 1 - ema.decay_at(step)
        for name, value in net.state_dict().items():
            if value.is_floating_point():
                reference[name] = torch.lerp(reference[name], value, weight)
            else:
                reference[name] = value.clone()
    assert all(torch.equal(ema.shadow[k], v) for k, v in reference.items())
