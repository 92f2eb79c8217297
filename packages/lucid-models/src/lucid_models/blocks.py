"""The convolutional blocks of YOLO26: bottleneck, C3k, C3k2 (densely chained) and SPPF.

Channel and repeat numbers are the caller's; the scale rules live in :mod:`lucid_models.scales`.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from lucid_models.attention import PSABlock
from lucid_models.conv import ConvBNAct

__all__ = ["SPPF", "Bottleneck", "C3k", "C3k2", "InnerUnit"]

InnerUnit = Literal["bottleneck", "c3k", "attention"]


class Bottleneck(nn.Module):
    """Two 3x3 ``ConvBNAct`` with a residual when ``C_in == C_out``.

    Args:
        in_channels: ``C_in``.
        out_channels: ``C_out``.
        expansion: hidden width ``int(C_out * expansion)``.

    Shapes:
        ``x``: ``(B, C_in, H, W)`` -> ``(B, C_out, H, W)``.
    """

    def __init__(self, in_channels: int, out_channels: int, expansion: float = 0.5) -> None:
        super().__init__()
        hidden = int(out_channels * expansion)
        self.cv1 = ConvBNAct(in_channels, hidden, 3)
        self.cv2 = ConvBNAct(hidden, out_channels, 3)
        self.residual = in_channels == out_channels

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C_in, H, W)`` -> ``(B, C_out, H, W)``."""
        y = self.cv2(self.cv1(x))
        return x + y if self.residual else y  # type: ignore[no-any-return]


class C3k(nn.Module):
    """CSP block: two 1x1 splits to ``C_out // 2``, bottlenecks on one, concat, 1x1 fuse.

    Args:
        in_channels: ``C_in``.
        out_channels: ``C_out``.
        num_bottlenecks: bottlenecks (expansion 1.0) on the processed split; the builds use 2.

    Shapes:
        ``x``: ``(B, C_in, H, W)`` -> ``(B, C_out, H, W)``.
    """

    def __init__(self, in_channels: int, out_channels: int, num_bottlenecks: int = 2) -> None:
        super().__init__()
        hidden = out_channels // 2
        self.cv1 = ConvBNAct(in_channels, hidden)
        self.cv2 = ConvBNAct(in_channels, hidden)
        self.cv3 = ConvBNAct(2 * hidden, out_channels)
        self.m = nn.Sequential(
            *(Bottleneck(hidden, hidden, expansion=1.0) for _ in range(num_bottlenecks))
        )

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C_in, H, W)`` -> ``(B, C_out, H, W)``."""
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), dim=1))  # type: ignore[no-any-return]


def _inner_unit(kind: InnerUnit, channels: int) -> nn.Module:
    if kind == "bottleneck":
        return Bottleneck(channels, channels)
    if kind == "c3k":
        return C3k(channels, channels)
    # The neck's attention tail: a bottleneck followed by a PSA block (assumptions.md M4).
    return nn.Sequential(Bottleneck(channels, channels), PSABlock(channels))


class C3k2(nn.Module):
    """Densely chained CSP block, the YOLO26 workhorse.

    A 1x1 conv lifts to ``2 * hidden`` channels, split into two halves; each of the ``n`` inner
    units reads the latest tensor and appends its output; a 1x1 conv fuses all ``(2 + n) * hidden``
    channels.

    Args:
        in_channels: ``C_in``.
        out_channels: ``C_out``.
        num_units: inner units ``n``.
        inner: ``"bottleneck"``, ``"c3k"`` (nested C3k) or ``"attention"`` (bottleneck + PSA).
        expansion: ``hidden = int(C_out * expansion)``.

    Shapes:
        ``x``: ``(B, C_in, H, W)`` -> ``(B, C_out, H, W)``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        num_units: int,
        *,
        inner: InnerUnit,
        expansion: float = 0.5,
    ) -> None:
        super().__init__()
        self.hidden = int(out_channels * expansion)
        self.cv1 = ConvBNAct(in_channels, 2 * self.hidden)
        self.cv2 = ConvBNAct((2 + num_units) * self.hidden, out_channels)
        self.m = nn.ModuleList(_inner_unit(inner, self.hidden) for _ in range(num_units))

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C_in, H, W)`` -> ``(B, C_out, H, W)``."""
        parts = list(self.cv1(x).chunk(2, dim=1))  # 2 x (B, hidden, H, W)
        for unit in self.m:
            parts.append(unit(parts[-1]))
        return self.cv2(torch.cat(parts, dim=1))  # type: ignore[no-any-return]


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast, with the YOLO26 residual.

    A 1x1 conv-BN *without activation* halves the channels, one ``k x k`` max-pool (stride 1)
    is applied ``num_pools`` times in sequence, the ``num_pools + 1`` maps are concatenated and
    fused by a 1x1 ``ConvBNAct``; the input is added back when ``C_in == C_out``.

    Shapes:
        ``x``: ``(B, C_in, H, W)`` -> ``(B, C_out, H, W)``.
    """

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int = 5, num_pools: int = 3
    ) -> None:
        super().__init__()
        hidden = in_channels // 2
        self.cv1 = ConvBNAct(in_channels, hidden, act=False)
        self.cv2 = ConvBNAct(hidden * (num_pools + 1), out_channels)
        self.pool = nn.MaxPool2d(kernel_size, stride=1, padding=kernel_size // 2)
        self.num_pools = num_pools
        self.residual = in_channels == out_channels

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C_in, H, W)`` -> ``(B, C_out, H, W)``."""
        maps = [self.cv1(x)]
        for _ in range(self.num_pools):
            maps.append(self.pool(maps[-1]))
        y = self.cv2(torch.cat(maps, dim=1))
        return x + y if self.residual else y  # type: ignore[no-any-return]
