"""RealNVP: the authors' structure, exact invertibility, the log-determinant, a normalised
density."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from lucid_train.losses.flow import RealNVP


def _perturbed_flow(seed: int = 0, scale: float = 0.15) -> RealNVP:
    """A float64 flow far from the identity (the default init is almost the identity)."""
    torch.manual_seed(seed)
    flow = RealNVP().double()
    with torch.no_grad():
        for p in flow.parameters():
            p.normal_(0.0, scale)
    return flow


def test_structure_is_six_alternating_couplings_of_two_64_wide_nets() -> None:
    flow = RealNVP()
    assert len(flow.scale_nets) == len(flow.shift_nets) == 6
    assert flow.keep.tolist() == [[0.0, 1.0], [1.0, 0.0]] * 3  # the first layer moves x
    widths = [m.out_features for m in flow.scale_nets[0] if isinstance(m, nn.Linear)]
    assert widths == [64, 64, 2]
    assert isinstance(flow.scale_nets[0][-1], nn.Tanh)  # bounded log-scale
    assert not isinstance(flow.shift_nets[0][-1], nn.Tanh)
    per_net = (2 * 64 + 64) + (64 * 64 + 64) + (64 * 2 + 2)
    assert sum(p.numel() for p in flow.parameters()) == 12 * per_net


def test_rejects_an_odd_number_of_layers() -> None:
    with pytest.raises(ValueError, match="even"):
        RealNVP(num_layers=5)


def test_to_latent_and_from_latent_invert_each_other() -> None:
    flow = _perturbed_flow().float()
    x = torch.randn(64, 2) * 2
    z, _ = flow.to_latent(x)
    assert not torch.allclose(z, x, atol=1e-2)  # a real transformation
    torch.testing.assert_close(flow.from_latent(z), x, atol=1e-5, rtol=0)
    z2 = torch.randn(64, 2)
    back, _ = flow.to_latent(flow.from_latent(z2))
    torch.testing.assert_close(back, z2, atol=1e-5, rtol=0)


def test_log_det_matches_the_autograd_jacobian() -> None:
    flow = _perturbed_flow(seed=1)
    for point in torch.randn(5, 2, dtype=torch.float64):
        jac = torch.autograd.functional.jacobian(lambda p: flow.to_latent(p)[0], point)
        _, log_det = flow.to_latent(point)
        expected = torch.linalg.slogdet(jac).logabsdet
        torch.testing.assert_close(log_det, expected, atol=1e-9, rtol=0)


def test_log_prob_is_a_normalised_density() -> None:
    flow = _perturbed_flow(seed=2, scale=0.3)
    step = 0.1
    axis = torch.arange(-10.0, 10.0, step, dtype=torch.float64) + step / 2
    grid = torch.stack(torch.meshgrid(axis, axis, indexing="xy"), dim=-1)  # (n, n, 2)
    with torch.no_grad():
        mass = flow.log_prob(grid).exp().sum() * step**2
    assert abs(float(mass) - 1.0) < 2e-3


def test_accepts_any_leading_shape_and_is_the_module_call() -> None:
    flow = RealNVP()
    x = torch.randn(3, 4, 5, 2)
    out = flow(x)
    assert out.shape == (3, 4, 5)
    torch.testing.assert_close(out, flow.log_prob(x.view(-1, 2)).view(3, 4, 5))


def test_starts_near_the_standard_normal() -> None:
    # Xavier gain 0.01 makes each coupling nearly constant, so the start is a near-affine flow.
    torch.manual_seed(0)
    flow = RealNVP()
    x = torch.randn(256, 2)
    normal = -0.5 * x.square().sum(-1) - math.log(2 * math.pi)
    with torch.no_grad():
        assert (flow.log_prob(x) - normal).abs().mean() < 1.0


def test_parameter_gradients_are_nn_linears_and_ignore_appended_zero_gradient_rows() -> None:
    # The flow reduces its parameter gradients per leading index, then across by position: the
    # same gradients as nn.Linear's to rounding, and bitwise unchanged by appended entries of
    # the leading axis whose gradient is zero (the pose loss's empty slots).
    flow = _perturbed_flow(seed=3).float()
    x = torch.randn(5, 3, 4, 2)

    def grads(
        points: torch.Tensor, weight: torch.Tensor, plain: bool = False
    ) -> list[torch.Tensor]:
        flow.zero_grad(set_to_none=True)
        log_prob = _plain_log_prob(flow, points) if plain else flow(points)
        (log_prob * weight).sum().backward()
        return [p.grad.clone() for p in flow.parameters() if p.grad is not None]

    weight = torch.rand(5, 3, 4)
    ours = grads(x, weight)
    torch.testing.assert_close(ours, grads(x, weight, plain=True), atol=1e-6, rtol=1e-5)
    wider = torch.cat([x, torch.randn(6, 3, 4, 2)])
    wider_weight = torch.cat([weight, torch.zeros(6, 3, 4)])
    assert all(torch.equal(a, b) for a, b in zip(ours, grads(wider, wider_weight), strict=True))


def _plain_log_prob(flow: RealNVP, x: torch.Tensor) -> torch.Tensor:
    """The flow's density through the nn.Sequential nets themselves (autograd's gradients)."""
    z = x
    log_det = x.new_zeros(x.shape[:-1])
    for i in reversed(range(len(flow.scale_nets))):
        kept = flow.keep[i] * z
        move = 1.0 - flow.keep[i]
        s, t = flow.scale_nets[i](kept) * move, flow.shift_nets[i](kept) * move
        z = kept + move * (z - t) * torch.exp(-s)
        log_det = log_det - s.sum(dim=-1)
    return -0.5 * z.square().sum(dim=-1) - math.log(2 * math.pi) + log_det
