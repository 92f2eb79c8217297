"""A YOLO-style spatial attention block for the float32 island's tests (and the capture tests'
attention net): qkv, positional and projection conv-BNs around `lucid_kernels.attention_weights`.

It lives with the tests, not in lucid-kernels, which holds the autograd Functions only; the
model's own block is `lucid_models.attention.Attention`. ``float32_island=False`` runs the
unprotected sequence, so a test can show what the island prevents.
"""

from __future__ import annotations

from torch import Tensor, nn

from lucid_kernels import attention_weights
from lucid_kernels.attention import _plain_weights

__all__ = ["SpatialAttention"]


class _ConvBN(nn.Module):
    """A bias-free conv and a BatchNorm (``conv``/``bn``), no activation."""

    def __init__(self, c_in: int, c_out: int, k: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, padding=k // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(self.conv(x))  # type: ignore[no-any-return]


class SpatialAttention(nn.Module):
    """Multi-head self-attention over a map's pixels with a depthwise positional conv.

    Args:
        dim: channels ``C``, divisible by ``num_heads``.
        num_heads: heads; default ``max(1, dim // 64)``.
        float32_island: weights through `attention_weights` (float32 under autocast), or not.

    Shapes:
        ``x``: ``(B, C, H, W)`` -> ``(B, C, H, W)``.
    """

    def __init__(
        self, dim: int, num_heads: int | None = None, *, float32_island: bool = True
    ) -> None:
        super().__init__()
        self.num_heads = max(1, dim // 64) if num_heads is None else num_heads
        self.head_dim = dim // self.num_heads
        self.key_dim = self.head_dim // 2
        self.scale = self.key_dim**-0.5
        self.float32_island = float32_island
        # Construction order qkv, proj, pe fixes which random numbers each layer draws.
        self.qkv = _ConvBN(dim, dim + 2 * self.key_dim * self.num_heads)
        self.proj = _ConvBN(dim, dim)
        self.pe = _ConvBN(dim, dim, 3, groups=dim)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H, W)`` -> ``(B, C, H, W)``."""
        B, C, H, W = x.shape
        q, k, v = (
            self.qkv(x)
            .view(B, self.num_heads, 2 * self.key_dim + self.head_dim, H * W)
            .split([self.key_dim, self.key_dim, self.head_dim], dim=2)
        )
        weights = attention_weights if self.float32_island else _plain_weights
        attn = weights(q, k, self.scale)  # (B, h, N, N)
        # Without autocast attn already has v's dtype and .to() is a no-op (no autograd node).
        out = (v @ attn.to(v.dtype).transpose(-2, -1)).view(B, C, H, W)
        return self.proj(out + self.pe(v.reshape(B, C, H, W)))  # type: ignore[no-any-return]
