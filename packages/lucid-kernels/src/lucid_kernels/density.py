"""The float32 density island for the keypoint RLE (residual log-likelihood) loss.

Why an island: with sigma floored at a small value, a finite float32 residual
``(target - pred) / sigma`` can exceed float16's 65504. Under fp16 autocast a flow made of
``nn.Linear`` layers would see it cast to float16 (``inf``) and return NaN. Here the whole
density (residual, Laplace term, flow log-density, log-sigma) runs with autocast disabled in at
least float32; float64 inputs stay float64.

Contract:
    * ``pred``, ``sigma`` and ``target`` are promoted to float32 (or kept float64) before any
      arithmetic; the result is float32 (or float64) and gradients come back in the inputs' own
      dtypes.
    * Under autocast the density is the private autograd Function ``_Float32Density``. Its
      backward recomputes the density from the detached saved inputs with autocast disabled and
      differentiates it with ``torch.autograd.grad``: ordinary autograd would run the backward
      matmuls of the float32 flow under the caller's autocast when ``backward()`` is called
      inside it, so gradients would depend on where backward runs.
    * Without autocast it is the plain operation sequence, with no Function in the graph.
    * ``flow_log_prob`` is called with autocast disabled on a float32 (or float64) residual, so
      its parameters must accept that dtype.

Warning:
    Under autocast the flow's parameters are inputs of the Function. An ``nn.Module`` flow
    hands over its own parameters; any other callable that reads tensors requiring gradients
    must list them in ``flow_parameters``. A tensor it reads but does not list is detected in
    backward and raises ``RuntimeError`` rather than silently losing its gradient.

Note:
    The flow of record (RealNVP) lives in lucid-train; :func:`standard_normal_log_prob` is the
    identity-flow default that makes the function usable alone. The Function is
    ``once_differentiable``: double backward through it raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx, once_differentiable

__all__ = ["rle_negative_log_likelihood", "standard_normal_log_prob"]

_LOG_2 = math.log(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

FlowLogProb = Callable[[Tensor], Tensor]


def standard_normal_log_prob(x: Tensor) -> Tensor:
    """Log-density of the 2-D standard normal (an identity flow).

    Args:
        x: residuals ``(..., 2)``.

    Returns:
        ``(...)``: ``sum over the last axis of (-x**2 / 2 - log(sqrt(2 pi)))``.
    """
    return (-0.5 * x.square() - _LOG_SQRT_2PI).sum(dim=-1)


def rle_negative_log_likelihood(
    pred: Tensor,
    sigma: Tensor,
    target: Tensor,
    flow_log_prob: FlowLogProb = standard_normal_log_prob,
    *,
    flow_parameters: Sequence[Tensor] | None = None,
) -> Tensor:
    """Per-point RLE negative log-likelihood, computed in at least float32 with autocast off.

    With the residual ``x = (target - pred) / sigma`` and ``Q`` the unit Laplace density per
    axis (``log Q(x) = sum_axes(-|x| - log 2)``)::

        nll = -log Q(x) - flow_log_prob(x) + sum_axes(log sigma)

    Args:
        pred: predicted keypoint coordinates ``(..., 2)``.
        sigma: predicted scales ``(..., 2)``, ``> 0``.
        target: target keypoint coordinates ``(..., 2)``.
        flow_log_prob: the flow's log-density ``(..., 2) -> (...)``, called on the residual with
            autocast disabled; defaults to :func:`standard_normal_log_prob`.
        flow_parameters: the tensors ``flow_log_prob`` reads that need gradients. Defaults to
            the flow's parameters when it is an ``nn.Module``, and to none otherwise.

    Returns:
        ``(...)`` per-point NLL (the broadcast of the three inputs' leading shapes), float32, or
        float64 when any input is float64.

    Raises:
        ValueError: an input's last axis is not 2, or the flow returns another shape than
            ``x.shape[:-1]``.
    """
    for name, tensor in (("pred", pred), ("sigma", sigma), ("target", target)):
        if tensor.dim() == 0 or tensor.shape[-1] != 2:
            raise ValueError(
                f"expected {name} of shape (..., 2), got {tuple(tensor.shape)}; the RLE density "
                "is over (x, y) residuals"
            )
    if not torch.is_autocast_enabled(pred.device.type):
        return _density(pred, sigma, target, flow_log_prob)
    if flow_parameters is None:
        flow_parameters = (
            list(flow_log_prob.parameters()) if isinstance(flow_log_prob, nn.Module) else []
        )
    island = _Float32Density.apply
    args = (pred, sigma, target, flow_log_prob, *flow_parameters)
    nll: Tensor = island(*args)  # type: ignore[no-untyped-call]
    return nll


def _density(pred: Tensor, sigma: Tensor, target: Tensor, flow_log_prob: FlowLogProb) -> Tensor:
    """The density itself, autocast off: ``(..., 2) x 3 -> (...)``."""
    compute = torch.promote_types(
        torch.promote_types(torch.promote_types(pred.dtype, sigma.dtype), target.dtype),
        torch.float32,
    )
    with torch.autocast(device_type=pred.device.type, enabled=False):
        pred_c, sigma_c, target_c = pred.to(compute), sigma.to(compute), target.to(compute)
        x = (target_c - pred_c) / sigma_c  # (..., 2)
        log_laplace = (-x.abs() - _LOG_2).sum(dim=-1)  # (...)
        log_flow = flow_log_prob(x)
        if log_flow.shape != x.shape[:-1]:
            raise ValueError(
                f"expected flow_log_prob to map (..., 2) residuals of shape {tuple(x.shape)} to "
                f"{tuple(x.shape[:-1])}, got {tuple(log_flow.shape)}"
            )
        log_sigma = sigma_c.log().sum(dim=-1)  # (...)
        return -log_laplace - log_flow.to(compute) + log_sigma


class _Float32Density(torch.autograd.Function):
    """:func:`_density` whose backward also runs with autocast off."""

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        pred: Tensor,
        sigma: Tensor,
        target: Tensor,
        flow_log_prob: FlowLogProb,
        *flow_parameters: Tensor,
    ) -> Tensor:
        ctx.save_for_backward(pred, sigma, target, *flow_parameters)
        ctx.flow_log_prob = flow_log_prob  # type: ignore[attr-defined]
        return _density(pred, sigma, target, flow_log_prob)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_nll: Tensor) -> tuple[Tensor | None, ...]:
        pred, sigma, target, *flow_parameters = ctx.saved_tensors
        needs = list(ctx.needs_input_grad)
        needs_inputs, needs_flow = needs[:3], needs[4:]
        # Same reason as the attention island: the caller's autocast must not reach the
        # recomputation, or backward inside and outside autocast would differ.
        with torch.enable_grad(), torch.autocast(device_type=pred.device.type, enabled=False):
            inputs = [
                t.detach().requires_grad_(need)
                for t, need in zip((pred, sigma, target), needs_inputs, strict=True)
            ]
            pred_in, sigma_in, target_in = inputs
            nll = _density(pred_in, sigma_in, target_in, ctx.flow_log_prob)
            _refuse_unlisted_leaves(nll, [*inputs, *flow_parameters])
            candidates = [*inputs, *flow_parameters]
            wanted = [
                t for t, need in zip(candidates, needs_inputs + needs_flow, strict=True) if need
            ]
            grads = iter(torch.autograd.grad(nll, wanted, grad_nll, allow_unused=True))
        out = [next(grads) if need else None for need in needs_inputs + needs_flow]
        return (*out[:3], None, *out[3:])


def _accumulator(leaf: Tensor) -> object:
    """The AccumulateGrad node of a leaf that requires grad."""
    node = leaf.view_as(leaf).grad_fn
    assert node is not None
    return node.next_functions[0][0]


def _refuse_unlisted_leaves(output: Tensor, listed: Sequence[Tensor]) -> None:
    """Raise if ``output`` depends on a tensor needing a gradient that the Function cannot return.

    Walks the recomputed graph and stops at the listed tensors (leaves, or the nodes that made
    non-leaf ones), so in the normal case it sees only the density's own few nodes.
    """
    # A leaf is known by its gradient accumulator, not by the Python object: a saved tensor
    # unpacked through saved-tensor hooks (as lucid-capture records) is a new object that shares
    # the original's accumulator, and the gradient reaches the original through it.
    accumulators = [_accumulator(t) for t in listed if t.grad_fn is None and t.requires_grad]
    known = {id(node) for node in accumulators}
    # Holding the node wrappers keeps them alive, so torch hands back these same objects and
    # their ids stay unique while we compare them.
    boundary = [t.grad_fn for t in listed if t.grad_fn is not None]
    seen: dict[int, object] = {id(node): node for node in boundary}
    stack = [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        variable = getattr(node, "variable", None)  # set on AccumulateGrad (leaf) nodes
        if isinstance(variable, Tensor):
            if id(node) not in known:
                raise RuntimeError(
                    "flow_log_prob reads a tensor that requires grad but is not among the "
                    f"flow's parameters (shape {tuple(variable.shape)}); its gradient would be "
                    "lost under autocast. To fix, pass it in flow_parameters or make the flow "
                    "an nn.Module that owns it"
                )
            continue
        stack.extend(next_node for next_node, _ in node.next_functions)
