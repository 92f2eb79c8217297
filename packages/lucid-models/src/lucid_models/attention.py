"""Position-sensitive attention: the attention unit, the PSA block and C2PSA.

The attention weights come from :func:`lucid_kernels.attention.attention_weights`, which computes
``softmax(q^T k * scale)`` in at least float32 under autocast: the logits sum ``key_dim``
products and can pass float16's 65504 before they are scaled, which softmax turns into NaN.
Without autocast it is the plain operation sequence, bit for bit.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lucid_kernels.attention import attention_weights
from lucid_models.conv import ConvBNAct

__all__ = ["C2PSA", "Attention", "PSABlock"]


class Attention(nn.Module):
    """Multi-head self-attention over the pixels of a map, plus a depthwise positional term.

    ``qkv`` (1x1 conv-BN, no activation) packs, per head, ``key_dim`` query, ``key_dim`` key and
    ``head_dim`` value channels; ``pe`` (depthwise 3x3 conv-BN) of the values is added to the
    attended values, and ``proj`` (1x1 conv-BN) projects the sum. ``head_dim = C // heads``,
    ``key_dim = head_dim // 2`` and the logit scale is ``key_dim ** -0.5``.

    Args:
        channels: ``C``, divisible by ``num_heads``.
        num_heads: heads; the builds use ``C // 64``.

    Shapes:
        ``x``: ``(B, C, H, W)`` -> ``(B, C, H, W)``.
    """

    def __init__(self, channels: int, num_heads: int) -> None:
        super().__init__()
        if num_heads < 1 or channels % num_heads:
            raise ValueError(f"expected num_heads >= 1 dividing {channels}, got {num_heads}")
        self.num_heads = num_heads
        self.head_dim = channels // num_heads
        self.key_dim = self.head_dim // 2
        self.scale = self.key_dim**-0.5
        self.qkv = ConvBNAct(channels, channels + 2 * self.key_dim * num_heads, act=False)
        self.proj = ConvBNAct(channels, channels, act=False)
        self.pe = ConvBNAct(channels, channels, 3, groups=channels, act=False)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H, W)`` -> ``(B, C, H, W)``."""
        B, C, H, W = x.shape
        q, k, v = (
            self.qkv(x)
            .view(B, self.num_heads, 2 * self.key_dim + self.head_dim, H * W)
            .split([self.key_dim, self.key_dim, self.head_dim], dim=2)
        )  # (B, h, key_dim, N) twice, (B, h, head_dim, N)
        weights = attention_weights(q, k, self.scale)  # (B, h, N, N)
        # Under autocast the island hands back q's dtype; v may differ (fp32 BN output).
        out = (v @ weights.to(v.dtype).transpose(-2, -1)).view(B, C, H, W)
        return self.proj(out + self.pe(v.reshape(B, C, H, W)))  # type: ignore[no-any-return]


class PSABlock(nn.Module):
    """Residual attention then a residual feed-forward (1x1 to ``2C`` with SiLU, 1x1 back).

    Shapes:
        ``x``: ``(B, C, H, W)`` -> ``(B, C, H, W)``.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.attn = Attention(channels, num_heads=max(1, channels // 64))
        self.ffn = nn.Sequential(
            ConvBNAct(channels, 2 * channels), ConvBNAct(2 * channels, channels, act=False)
        )

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H, W)`` -> ``(B, C, H, W)``."""
        x = x + self.attn(x)
        return x + self.ffn(x)  # type: ignore[no-any-return]


class C2PSA(nn.Module):
    """CSP split around ``n`` PSA blocks: one half passes, the other is attended, then fused.

    Args:
        channels: ``C`` in and out; the hidden half is ``C // 2``.
        num_blocks: PSA blocks on the attended half.

    Shapes:
        ``x``: ``(B, C, H, W)`` -> ``(B, C, H, W)``.
    """

    def __init__(self, channels: int, num_blocks: int) -> None:
        super().__init__()
        self.hidden = channels // 2
        self.cv1 = ConvBNAct(channels, 2 * self.hidden)
        self.cv2 = ConvBNAct(2 * self.hidden, channels)
        self.m = nn.Sequential(*(PSABlock(self.hidden) for _ in range(num_blocks)))

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H, W)`` -> ``(B, C, H, W)``."""
        a, b = self.cv1(x).split((self.hidden, self.hidden), dim=1)
        return self.cv2(torch.cat((a, self.m(b)), dim=1))  # type: ignore[no-any-return]
