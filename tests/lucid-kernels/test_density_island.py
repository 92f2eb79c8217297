"""The float32 density island: the keypoint RLE density stays finite beyond fp16's range."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import Tensor, nn

from lucid_kernels import rle_negative_log_likelihood, standard_normal_log_prob

FP16_MAX = torch.finfo(torch.float16).max  # 65504


class CouplingFlow(nn.Module):
    """One affine coupling layer of ``nn.Linear`` layers, which autocast would run in fp16.

    ``x0`` passes through and conditions a scale and shift of ``x1``:
    ``z = (x0, x1 * exp(s) + t)`` with ``(s, t) = net(x * mask)``, so
    ``log p(x) = log N(z; 0, I) + s``. Beyond 65504 an fp16 ``net`` turns ``inf`` into NaN.
    """

    mask: Tensor

    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.LeakyReLU(), nn.Linear(hidden, 2))
        self.register_buffer("mask", torch.tensor([1.0, 0.0]))

    def forward(self, x: Tensor) -> Tensor:
        """``(..., 2) -> (...)`` log-density."""
        s, t = self.net(x * self.mask).unbind(-1)  # (...), (...)
        s = torch.tanh(s)
        z = torch.stack([x[..., 0], x[..., 1] * s.exp() + t], dim=-1)  # (..., 2)
        return standard_normal_log_prob(z) + s


def unprotected_nll(pred: Tensor, sigma: Tensor, target: Tensor, flow: CouplingFlow) -> Tensor:
    """The same density written without the island: whatever autocast is on applies."""
    x = (target - pred) / sigma
    log_laplace = (-x.abs() - math.log(2.0)).sum(dim=-1)
    return -log_laplace - flow(x) + sigma.log().sum(dim=-1)


def large_residual_case(device: torch.device) -> tuple[Tensor, Tensor, Tensor, CouplingFlow]:
    """Keypoints whose float32 residual reaches ~1e5 through sigma's small floor."""
    torch.manual_seed(0)
    flow = CouplingFlow().to(device)
    pred = torch.randn(4, 17, 2, device=device).requires_grad_()
    target = pred.detach() + 0.1 * torch.randn(4, 17, 2, device=device)
    sigma = torch.full((4, 17, 2), 1e-6, device=device).requires_grad_()
    return pred, sigma, target, flow


def test_fp16_autocast_keeps_residual_beyond_65504_finite(device: torch.device) -> None:
    """Loss and every gradient stay finite under fp16 autocast; the unprotected math does not."""
    pred, sigma, target, flow = large_residual_case(device)
    residual = (target - pred.detach()) / sigma.detach()
    assert residual.isfinite().all()
    assert residual.abs().max() > FP16_MAX, "probe lost its overflow"

    with torch.autocast(device.type, dtype=torch.float16):
        nll = rle_negative_log_likelihood(pred, sigma, target, flow)
    assert nll.dtype == torch.float32
    assert bool(nll.isfinite().all())
    nll.mean().backward()
    for name, tensor in [("pred", pred), ("sigma", sigma), *flow.named_parameters()]:
        assert tensor.grad is not None, f"{name}: no gradient"
        assert bool(tensor.grad.isfinite().all()), f"{name}: non-finite gradient"

    with torch.autocast(device.type, dtype=torch.float16):
        unprotected = unprotected_nll(pred, sigma, target, flow)
    assert not bool(unprotected.isfinite().all()), "unprotected fp16 density stayed finite"


def test_fp16_inputs_are_promoted_to_float32(device: torch.device) -> None:
    """Half-precision head outputs are promoted before the residual is formed."""
    pred = torch.zeros(3, 2, dtype=torch.float16, device=device)
    sigma = torch.full((3, 2), 1e-3, dtype=torch.float16, device=device)
    target = torch.full((3, 2), 100.0, dtype=torch.float16, device=device)
    with torch.autocast(device.type, dtype=torch.float16):
        nll = rle_negative_log_likelihood(pred, sigma, target)
    assert nll.dtype == torch.float32
    assert bool(nll.isfinite().all())  # residual ~1e5: fp16 would hold inf


def test_float32_matches_the_written_density(device: torch.device) -> None:
    """Without autocast the result is bitwise the density written out by hand."""
    pred, sigma, target, flow = large_residual_case(device)
    sigma = (torch.rand(4, 17, 2, device=device) + 0.1).requires_grad_()
    got = rle_negative_log_likelihood(pred, sigma, target, flow)
    assert got.shape == (4, 17)
    assert torch.equal(got, unprotected_nll(pred, sigma, target, flow))


def test_default_flow_is_the_standard_normal() -> None:
    """The identity-flow default is log N(x; 0, I) summed over the two axes."""
    x = torch.randn(5, 2, dtype=torch.float64)
    expected = torch.distributions.Normal(0.0, 1.0).log_prob(x).sum(dim=-1)
    torch.testing.assert_close(standard_normal_log_prob(x), expected, rtol=0, atol=1e-12)


def test_float64_is_preserved_and_gradchecks() -> None:
    """Float64 inputs compute in float64; derivatives match finite differences."""
    gen = torch.Generator().manual_seed(0)
    pred = torch.randn(3, 2, dtype=torch.float64, generator=gen, requires_grad=True)
    sigma = (torch.rand(3, 2, dtype=torch.float64, generator=gen) + 0.5).requires_grad_()
    target = torch.randn(3, 2, dtype=torch.float64, generator=gen)
    flow = CouplingFlow().double()

    with torch.autocast("cpu", dtype=torch.float16):
        assert rle_negative_log_likelihood(pred, sigma, target, flow).dtype == torch.float64
    assert torch.autograd.gradcheck(
        lambda p, s: rle_negative_log_likelihood(p, s, target), (pred, sigma)
    )
    assert torch.autograd.gradcheck(
        lambda p, s: rle_negative_log_likelihood(p, s, target, flow), (pred, sigma)
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gradients_ignore_backward_autocast(
    device: torch.device, dtype: torch.dtype, exact_float32: None
) -> None:
    """Backward inside or outside autocast gives bitwise equal gradients."""
    pred, sigma, target, flow = large_residual_case(device)

    def run(backward_inside: bool) -> list[Tensor]:
        p = pred.detach().clone().requires_grad_()
        s = sigma.detach().clone().requires_grad_()
        f = copy.deepcopy(flow)
        with torch.autocast(device.type, dtype=dtype):
            loss = rle_negative_log_likelihood(p, s, target, f).mean()
            if backward_inside:
                loss.backward()
        if not backward_inside:
            loss.backward()
        grads = [p.grad, s.grad, *(q.grad for q in f.parameters())]
        assert all(g is not None for g in grads)
        return [g for g in grads if g is not None]

    for index, (a, b) in enumerate(zip(run(True), run(False), strict=True)):
        assert torch.equal(a, b), f"gradient {index}: backward autocast changed it"


def test_wrong_last_axis_raises() -> None:
    """The density is over (x, y) residuals."""
    with pytest.raises(ValueError, match=r"expected sigma of shape \(\.\.\., 2\), got \(4, 3\)"):
        rle_negative_log_likelihood(torch.zeros(4, 2), torch.ones(4, 3), torch.zeros(4, 2))


def test_flow_of_wrong_shape_raises() -> None:
    """A flow must reduce the last axis."""
    with pytest.raises(ValueError, match=r"flow_log_prob.*got \(4, 2\)"):
        rle_negative_log_likelihood(
            torch.zeros(4, 2), torch.ones(4, 2), torch.zeros(4, 2), lambda x: x
        )


def test_autocast_routes_through_the_island_only_when_on(device: torch.device) -> None:
    """Autocast on: the Function is in the graph; off: the plain sequence."""
    pred, sigma, target, flow = large_residual_case(device)
    plain = rle_negative_log_likelihood(pred, sigma, target, flow)
    assert plain.grad_fn is not None
    assert "_Float32Density" not in type(plain.grad_fn).__name__
    with torch.autocast(device.type, dtype=torch.bfloat16):
        island = rle_negative_log_likelihood(pred, sigma, target, flow)
    assert island.grad_fn is not None
    assert "_Float32Density" in type(island.grad_fn).__name__


def test_callable_flow_with_listed_parameters_gets_gradients() -> None:
    """A closure flow receives its gradients when it lists its tensors."""
    weight = torch.tensor([0.5, -0.25], requires_grad=True)

    def flow(x: Tensor) -> Tensor:
        return standard_normal_log_prob(x) + (x * weight).sum(dim=-1)

    pred = torch.randn(6, 2, requires_grad=True)
    sigma, target = torch.rand(6, 2) + 0.5, torch.randn(6, 2)
    expected = torch.autograd.grad(
        rle_negative_log_likelihood(pred, sigma, target, flow).sum(),
        (
            pred,
            weight,
        ),
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        nll = rle_negative_log_likelihood(pred, sigma, target, flow, flow_parameters=[weight])
    got = torch.autograd.grad(nll.sum(), (pred, weight))
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)  # same math, other kernels order


def test_unlisted_flow_tensor_raises_instead_of_losing_its_gradient() -> None:
    """A closure that hides a tensor needing grad is refused in backward, not silently skipped."""
    weight = torch.tensor([0.5, -0.25], requires_grad=True)

    def flow(x: Tensor) -> Tensor:
        return (x * weight).sum(dim=-1)

    pred = torch.randn(6, 2, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        nll = rle_negative_log_likelihood(pred, torch.ones(6, 2), torch.zeros(6, 2), flow)
    with pytest.raises(RuntimeError, match=r"not among the flow's parameters \(shape \(2,\)\)"):
        nll.sum().backward()


def test_listed_non_leaf_flow_tensor_passes_its_gradient_on() -> None:
    """A listed tensor computed from another gets its gradient, which flows on to the source."""
    base = torch.tensor([1.0, -0.5], requires_grad=True)
    weight = base * 0.5

    def flow(x: Tensor) -> Tensor:
        return (x * weight).sum(dim=-1)

    pred, sigma, target = torch.randn(6, 2), torch.ones(6, 2), torch.zeros(6, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        nll = rle_negative_log_likelihood(pred, sigma, target, flow, flow_parameters=[weight])
    nll.sum().backward()
    assert base.grad is not None
    torch.testing.assert_close(base.grad, 0.5 * pred.sum(dim=0), rtol=1e-6, atol=1e-6)
