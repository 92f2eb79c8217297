"""``ConvBNAct``: the convolution unit every YOLO26 block is made of.

BatchNorm uses ``eps=1e-3`` and ``momentum=0.03``, the values the authors' builds set on every
BatchNorm (assumptions.md M2). The attribute names ``conv``/``bn``/``act`` are the authors', so
a state dict lines up with their checkpoints.
"""

from __future__ import annotations

import math

from torch import Tensor, nn

__all__ = ["BN_EPS", "BN_MOMENTUM", "ConvBNAct", "depthwise"]

BN_EPS = 1e-3
BN_MOMENTUM = 0.03


class ConvBNAct(nn.Module):
    """``act(bn(conv(x)))`` with a bias-free ``Conv2d`` and "same" padding for odd kernels.

    Args:
        in_channels: ``C_in``.
        out_channels: ``C_out``; divisible by ``groups``, as is ``C_in``.
        kernel_size: square kernel size ``k``, padded by ``k // 2``.
        stride: convolution stride.
        groups: convolution groups (``groups == C_in == C_out`` is depthwise).
        act: apply SiLU after the BatchNorm when ``True``, nothing when ``False``.

    Shapes:
        ``x``: ``(B, C_in, H, W)`` -> ``(B, C_out, ceil(H / stride), ceil(W / stride))``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 1,
        stride: int = 1,
        *,
        groups: int = 1,
        act: bool = True,
    ) -> None:
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"expected in_channels ({in_channels}) and out_channels ({out_channels}) "
                f"divisible by groups ({groups})"
            )
        self.conv = nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding=kernel_size // 2,
            groups=groups,
            bias=False,
        )
        self.bn = nn.BatchNorm2d(out_channels, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.act: nn.Module = nn.SiLU() if act else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C_in, H, W)`` -> ``(B, C_out, H', W')``."""
        return self.act(self.bn(self.conv(x)))  # type: ignore[no-any-return]


def depthwise(in_channels: int, out_channels: int, kernel_size: int = 3) -> ConvBNAct:
    """A ``ConvBNAct`` grouped by ``gcd(C_in, C_out)`` (depthwise when the two are equal)."""
    return ConvBNAct(
        in_channels, out_channels, kernel_size, groups=math.gcd(in_channels, out_channels)
    )
