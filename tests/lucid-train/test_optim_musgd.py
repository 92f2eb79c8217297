"""MuSGD: the authors' update; closure, GradScaler and state_dict protocol; determinism."""

from __future__ import annotations

import io
import math

import pytest
import torch
from torch import Tensor, nn
from torch.amp.grad_scaler import GradScaler

from lucid_train.optim import (
    MuSGD,
    WarmupLinear,
    WarmupLinearLR,
    muon_scale,
    orthogonalize,
    param_groups,
)


def _reference_steps(
    w: Tensor,
    grads: list[Tensor],
    *,
    lr: float,
    mu: float,
    wd: float,
    muon: float,
    sgd: float,
    decay_before_muon: bool = False,
) -> Tensor:
    """The update in ``musgd.py``'s docstring, written out for one matrix."""
    w = w.clone()
    m = torch.zeros_like(w)
    b = torch.zeros_like(w)
    for g in grads:
        m = mu * m + (1 - mu) * g
        u = mu * m + (1 - mu) * g
        o = orthogonalize(u.reshape(u.shape[0], -1)).reshape(w.shape)
        decayed = g + wd * w
        w = w - lr * muon * muon_scale(w.shape) * o
        d = decayed if decay_before_muon else g + wd * w
        b = mu * b + d
        w = w - lr * sgd * (d + mu * b)
    return w


@pytest.mark.parametrize("shape", [(12, 5), (6, 4, 3, 3)])
def test_muon_group_follows_the_authors_update(shape: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(0)
    w0 = torch.randn(shape, generator=gen)
    grads = [torch.randn(shape, generator=gen) for _ in range(3)]
    p = nn.Parameter(w0.clone())
    opt = MuSGD([{"params": [p], "use_muon": True}], lr=0.5, momentum=0.9, weight_decay=0.3)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    expected = _reference_steps(w0, grads, lr=0.5, mu=0.9, wd=0.3, muon=0.2, sgd=1.0)
    torch.testing.assert_close(p.detach(), expected, rtol=1e-5, atol=1e-6)
    # The decay reads the weights after the Muon part (the authors' order); the other order differs.
    other = _reference_steps(
        w0, grads, lr=0.5, mu=0.9, wd=0.3, muon=0.2, sgd=1.0, decay_before_muon=True
    )
    assert (other - expected).abs().max() > 1e-4


def test_muon_scale_reads_the_last_two_dimensions() -> None:
    assert muon_scale((64, 16)) == 2.0
    assert muon_scale((16, 64)) == 1.0
    assert muon_scale((64, 16, 3, 3)) == 1.0
    assert muon_scale((8, 4, 6, 3)) == math.sqrt(2.0)


def _sgd_pair() -> tuple[list[Tensor], list[Tensor]]:
    gen = torch.Generator().manual_seed(1)
    shapes = [(7,), (5, 3)]
    start = [torch.randn(s, generator=gen) for s in shapes]
    grads = [[torch.randn(s, generator=gen) for s in shapes] for _ in range(4)]
    ours = [nn.Parameter(t.clone()) for t in start]
    theirs = [nn.Parameter(t.clone()) for t in start]
    musgd = MuSGD(ours, lr=0.1, momentum=0.9, weight_decay=0.01)
    sgd = torch.optim.SGD(theirs, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)
    for step in grads:
        for p, q, g in zip(ours, theirs, step, strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        musgd.step()
        sgd.step()
    return [p.detach() for p in ours], [q.detach() for q in theirs]


def test_plain_groups_are_nesterov_sgd() -> None:
    ours, theirs = _sgd_pair()
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_muon_group_without_muon_share_is_sgd_at_sgd_share() -> None:
    gen = torch.Generator().manual_seed(2)
    w0 = torch.randn(6, 4, generator=gen)
    grads = [torch.randn(6, 4, generator=gen) for _ in range(3)]
    p, q = nn.Parameter(w0.clone()), nn.Parameter(w0.clone())
    musgd = MuSGD([{"params": [p], "use_muon": True}], lr=0.2, weight_decay=0.05, muon=0.0, sgd=0.5)
    sgd = torch.optim.SGD([q], lr=0.1, momentum=0.9, weight_decay=0.05, nesterov=True)
    for g in grads:
        p.grad, q.grad = g.clone(), g.clone()
        musgd.step()
        sgd.step()
    torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-7)


def test_parameters_without_grad_are_skipped() -> None:
    a, b = nn.Parameter(torch.ones(3, 3)), nn.Parameter(torch.ones(3, 3))
    opt = MuSGD([{"params": [a, b], "use_muon": True}])
    a.grad = torch.full((3, 3), 0.5)
    opt.step()
    assert torch.equal(b.detach(), torch.ones(3, 3)) and len(opt.state[b]) == 0
    assert set(opt.state[a]) == {"muon_buffer", "momentum_buffer"}
    assert not torch.equal(a.detach(), torch.ones(3, 3))


def test_closure_runs_with_grad_enabled_and_its_loss_is_returned() -> None:
    p = nn.Parameter(torch.ones(4, 2))
    opt = MuSGD([{"params": [p], "use_muon": True}])

    def closure() -> Tensor:
        assert torch.is_grad_enabled()
        opt.zero_grad()
        loss = (p**2).sum()
        loss.backward()
        return loss

    with torch.no_grad():
        loss = opt.step(closure)
    assert float(loss.detach()) == 8.0
    assert not torch.equal(p.detach(), torch.ones(4, 2))


def test_float64_parameters_stay_float64() -> None:
    p = nn.Parameter(torch.randn(5, 3, dtype=torch.float64))
    opt = MuSGD([{"params": [p], "use_muon": True}])
    p.grad = torch.randn(5, 3, dtype=torch.float64)
    opt.step()
    assert p.dtype == torch.float64
    assert all(t.dtype == torch.float64 for t in opt.state[p].values())


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="momentum"):
        MuSGD([nn.Parameter(torch.ones(2, 2))], momentum=1.0)
    with pytest.raises(ValueError, match="matrices"):
        MuSGD([{"params": [nn.Parameter(torch.ones(3))], "use_muon": True}])
    with pytest.raises(ValueError, match="muon"):
        MuSGD([nn.Parameter(torch.ones(2, 2))], muon=float("nan"))


# -- a small conv net, trained through the real groups and schedule -------------------------


def _net(seed: int = 0) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.SiLU(),
            nn.Flatten(),
            nn.Linear(8 * 6 * 6, 5),
        )


def _data(step: int) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return torch.randn(4, 3, 6, 6, generator=gen), torch.randn(4, 5, generator=gen)


def _build(net: nn.Module) -> tuple[MuSGD, WarmupLinearLR]:
    opt = MuSGD(param_groups(net, batch_size=4, accumulate=1))
    sched = WarmupLinearLR(opt, WarmupLinear(steps_per_epoch=3, epochs=4, warmup_epochs=1.0))
    return opt, sched


def _train(net: nn.Module, opt: MuSGD, sched: WarmupLinearLR, steps: range) -> None:
    for step in steps:
        x, y = _data(step)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        sched.step()


def _round_trip(obj: dict[str, object]) -> dict[str, object]:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    loaded: dict[str, object] = torch.load(buffer, weights_only=True)
    return loaded


def _flat_state(net: nn.Module, opt: MuSGD) -> list[Tensor]:
    tensors = list(net.state_dict().values())
    for state in opt.state_dict()["state"].values():
        tensors += [state[k] for k in sorted(state)]
    return tensors


def test_state_dict_round_trip_continues_bitwise() -> None:
    net = _net()
    opt, sched = _build(net)
    _train(net, opt, sched, range(0, 5))
    saved = _round_trip(
        {"net": net.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}
    )
    _train(net, opt, sched, range(5, 10))

    resumed = _net(seed=123)  # other initial weights: everything must come from the checkpoint
    opt2, sched2 = _build(resumed)
    resumed.load_state_dict(saved["net"])  # type: ignore[arg-type]
    opt2.load_state_dict(saved["opt"])  # type: ignore[arg-type]
    sched2.load_state_dict(saved["sched"])  # type: ignore[arg-type]
    _train(resumed, opt2, sched2, range(5, 10))

    first, second = _flat_state(net, opt), _flat_state(resumed, opt2)
    assert len(first) == len(second)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in opt2.param_groups]


def test_training_is_deterministic_on_cpu() -> None:
    runs = []
    for _ in range(2):
        net = _net()
        opt, sched = _build(net)
        _train(net, opt, sched, range(6))
        runs.append(_flat_state(net, opt))
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))


def _scaled_step(scaler_scale: float | None, poison: bool = False) -> list[Tensor]:
    net = _net()
    opt, _ = _build(net)
    x, y = _data(0)
    loss = nn.functional.mse_loss(net(x), y)
    if scaler_scale is None:
        loss.backward()
        opt.step()
    else:
        scaler = GradScaler("cpu", init_scale=scaler_scale)
        scaler.scale(loss).backward()
        if poison:
            next(net.parameters()).grad[0] = float("inf")  # type: ignore[index]
        scaler.step(opt)
        scaler.update()
    return [p.detach().clone() for p in net.parameters()]


def test_grad_scaler_step_equals_the_unscaled_step() -> None:
    plain = _scaled_step(None)
    scaled = _scaled_step(2.0**12)
    assert all(torch.equal(a, b) for a, b in zip(plain, scaled, strict=True))


def test_grad_scaler_skips_the_step_on_inf() -> None:
    start = [p.detach().clone() for p in _net().parameters()]
    skipped = _scaled_step(2.0**12, poison=True)
    assert all(torch.equal(a, b) for a, b in zip(start, skipped, strict=True))
