"""``ConvBNAct``: the convolution unit every YOLO26 block is made of.

BatchNorm uses ``eps=1e-3`` and ``momentum=0.03``, the values the authors' builds set on every
BatchNorm (assumptions.md M2).
"""

from __future__ import annotations

import math

from lucid_kernels.conv import ConvBN

__all__ = ["BN_EPS", "BN_MOMENTUM", "ConvBNAct", "depthwise"]

BN_EPS = 1e-3
BN_MOMENTUM = 0.03


class ConvBNAct(ConvBN):
    """``act(bn(conv(x)))``: lucid-kernels' ``ConvBN`` with the authors' BatchNorm settings.

    Args are those of :class:`lucid_kernels.ConvBN` (``eps``/``momentum`` fixed to
    :data:`BN_EPS`/:data:`BN_MOMENTUM`).

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
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            groups=groups,
            act=act,
            eps=BN_EPS,
            momentum=BN_MOMENTUM,
        )


def depthwise(in_channels: int, out_channels: int, kernel_size: int = 3) -> ConvBNAct:
    """A ``ConvBNAct`` grouped by ``gcd(C_in, C_out)`` (depthwise when the two are equal)."""
    return ConvBNAct(
        in_channels, out_channels, kernel_size, groups=math.gcd(in_channels, out_channels)
    )
