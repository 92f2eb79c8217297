"""The float32 attention island: attention weights in at least float32 under autocast.

Why an island: the attention logits ``q^T k`` sum ``key_dim`` products and can exceed float16's
largest finite value (65504) *before* their scale is applied; under fp16 autocast they become
``inf`` and softmax turns that into NaN. :func:`attention_weights` computes the logits and their
softmax in at least float32 with autocast off whenever autocast is on for the inputs' device.

Contract:
    * Under autocast, the weights come from the private autograd Function
      ``_Float32AttentionWeights``: forward *and* backward run with autocast disabled, in float32
      (float64 inputs stay float64). Backward recomputes the weights from the detached saved
      ``q`` and ``k`` and differentiates them with ``torch.autograd.grad``, so no derivative is
      written by hand, and gradients do not depend on whether ``backward()`` is called inside or
      outside autocast (a CUDA-graph recorder may record backward inside the caller's autocast).
    * Outputs and gradients come back in the input dtypes.
    * Without autocast, :func:`attention_weights` is the plain operation sequence
      ``((q.transpose(-2, -1) @ k) * scale).softmax(-1)``: no casts, no contexts, so outputs and
      every gradient are bitwise those of the unwrapped computation.

Note:
    The Function is ``once_differentiable``: double backward through the island raises.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

__all__ = ["attention_weights"]


def _plain_weights(q: Tensor, k: Tensor, scale: float) -> Tensor:
    """The unprotected sequence: ``(B, h, d, N), (B, h, d, N) -> (B, h, N, N)``."""
    attn = (q.transpose(-2, -1) @ k) * scale  # (B, h, N, N)
    return attn.softmax(dim=-1)


def _island_dtype(q: Tensor, k: Tensor) -> torch.dtype:
    """At least float32; float64 stays float64."""
    return torch.promote_types(torch.promote_types(q.dtype, k.dtype), torch.float32)


class _Float32AttentionWeights(torch.autograd.Function):
    """``softmax(q^T k * scale)`` in at least float32 with autocast off, forward and backward."""

    @staticmethod
    def forward(ctx: FunctionCtx, q: Tensor, k: Tensor, scale: float) -> Tensor:
        compute = _island_dtype(q, k)
        with torch.autocast(device_type=q.device.type, enabled=False):
            weights = _plain_weights(q.to(compute), k.to(compute), scale)
        ctx.save_for_backward(q, k)
        ctx.scale = scale  # type: ignore[attr-defined]
        return weights.to(torch.promote_types(q.dtype, k.dtype))

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_weights: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        q, k = ctx.saved_tensors
        need_q, need_k = ctx.needs_input_grad[:2]
        compute = _island_dtype(q, k)
        # The caller's autocast state must not reach the recomputation: eager backward runs
        # outside autocast, a recorded one may run inside it, and both must give equal bits.
        with torch.enable_grad(), torch.autocast(device_type=q.device.type, enabled=False):
            q_in = q.detach().requires_grad_(need_q)
            k_in = k.detach().requires_grad_(need_k)
            weights = _plain_weights(q_in.to(compute), k_in.to(compute), ctx.scale)
            inputs = [t for t, need in ((q_in, need_q), (k_in, need_k)) if need]
            grads = iter(torch.autograd.grad(weights, inputs, grad_weights.to(compute)))
        # autograd.grad through the .to(compute) casts returns each gradient in its input dtype.
        grad_q = next(grads) if need_q else None
        grad_k = next(grads) if need_k else None
        return grad_q, grad_k, None


def attention_weights(q: Tensor, k: Tensor, scale: float) -> Tensor:
    """Attention weights ``softmax((q^T k) * scale, dim=-1)``, float32-safe under autocast.

    Args:
        q: queries ``(B, heads, key_dim, N)``.
        k: keys ``(B, heads, key_dim, N)``.
        scale: logit scale, usually ``key_dim ** -0.5``.

    Returns:
        ``(B, heads, N, N)`` weights, each row summing to 1. Under autocast on ``q``'s device
        they are computed in at least float32 by the island and returned in ``q``/``k``'s dtype;
        otherwise this is the plain operation sequence, bit for bit.
    """
    # The meta device (shape inference, FLOP counting) has no autocast state to ask about.
    if q.device.type != "meta" and torch.is_autocast_enabled(q.device.type):
        island = _Float32AttentionWeights.apply
        weights: Tensor = island(q, k, scale)  # type: ignore[no-untyped-call]
        return weights
    return _plain_weights(q, k, scale)
