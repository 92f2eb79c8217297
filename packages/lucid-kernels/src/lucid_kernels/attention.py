"""The float32 attention island and the YOLO-style ``SpatialAttention`` block that uses it.

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
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx, once_differentiable

from lucid_kernels.conv import ConvBN

__all__ = ["SpatialAttention", "attention_weights"]


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


class SpatialAttention(nn.Module):
    """Multi-head self-attention over the pixels of a feature map, with a positional conv.

    ``qkv`` (1x1 conv-BN) gives per head ``key_dim`` query, ``key_dim`` key and ``head_dim``
    value channels; the weights ``softmax(q^T k * key_dim**-0.5)`` mix the values; a depthwise
    3x3 conv-BN of the values (``pe``) is added and a 1x1 conv-BN (``proj``) projects the sum.

    Args:
        dim: channels ``C``, divisible by ``num_heads``.
        num_heads: heads; default ``max(1, dim // 64)``.
        attn_ratio: ``key_dim = int(head_dim * attn_ratio)`` with ``head_dim = dim // num_heads``.
        float32_island: compute the weights through :func:`attention_weights` (float32 under
            autocast). ``False`` runs the unprotected sequence, whose fp16 logits can overflow;
            it exists so tests can show what the island prevents.

    Shapes:
        ``x``: ``(B, C, H, W)`` -> ``(B, C, H, W)``, same dtype as the convolutions give.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int | None = None,
        attn_ratio: float = 0.5,
        *,
        float32_island: bool = True,
    ) -> None:
        super().__init__()
        heads = max(1, dim // 64) if num_heads is None else num_heads
        if heads < 1 or dim % heads:
            raise ValueError(f"expected num_heads >= 1 dividing dim ({dim}), got {heads}")
        self.num_heads = heads
        self.head_dim = dim // heads
        self.key_dim = int(self.head_dim * attn_ratio)
        if self.key_dim < 1:
            raise ValueError(
                f"expected key_dim = int(head_dim * attn_ratio) >= 1, got head_dim "
                f"{self.head_dim} and attn_ratio {attn_ratio}; raise attn_ratio or use fewer heads"
            )
        self.scale = self.key_dim**-0.5
        self.float32_island = float32_island
        # Construction order qkv, proj, pe fixes which random numbers each layer draws.
        self.qkv = ConvBN(dim, dim + 2 * self.key_dim * heads, 1, act=False)
        self.proj = ConvBN(dim, dim, 1, act=False)
        self.pe = ConvBN(dim, dim, 3, groups=dim, act=False)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H, W)`` -> ``(B, C, H, W)``."""
        B, C, H, W = x.shape
        N = H * W
        qkv = self.qkv(x)  # (B, C + 2 * heads * key_dim, H, W)
        q, k, v = qkv.view(B, self.num_heads, 2 * self.key_dim + self.head_dim, N).split(
            [self.key_dim, self.key_dim, self.head_dim], dim=2
        )  # (B, h, key_dim, N), (B, h, key_dim, N), (B, h, head_dim, N)
        if self.float32_island:
            attn = attention_weights(q, k, self.scale)
        else:
            attn = _plain_weights(q, k, self.scale)  # (B, h, N, N)
        # Without autocast attn already has v's dtype and .to() is a no-op (no autograd node).
        out = (v @ attn.to(v.dtype).transpose(-2, -1)).view(B, C, H, W)
        out = out + self.pe(v.reshape(B, C, H, W))
        return self.proj(out)  # type: ignore[no-any-return]
