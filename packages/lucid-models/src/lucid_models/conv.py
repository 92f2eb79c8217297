"""``ConvBNAct``: the convolution unit every YOLO26 block is made of.

BatchNorm uses ``eps=1e-3`` and ``momentum=0.03``, the values the authors' builds set on every
BatchNorm (assumptions.md M2). The attribute names ``conv``/``bn``/``act`` are the authors', so
a state dict lines up with their checkpoints.

In training on CUDA, with a channels-last input, the BatchNorm and the SiLU run as one fused
pair of Triton passes (`lucid_kernels.batch_norm_silu`): the same statistics, running-buffer
updates and gradients, without the BatchNorm's output ever reaching memory. Setting
``LUCID_FUSE_BN_SILU=0`` in the environment (or `FUSE_BN_SILU` to False) keeps torch's two
operations, for comparison.
"""

from __future__ import annotations

import math
import os

from torch import Tensor, nn

from lucid_kernels import batch_norm_silu, batch_norm_silu_applies

__all__ = ["BN_EPS", "BN_MOMENTUM", "FUSE_BN_SILU", "ConvBNAct", "depthwise"]

BN_EPS = 1e-3
BN_MOMENTUM = 0.03
_FUSE = os.environ.get("LUCID_FUSE_BN_SILU", "1").strip().lower()
_OFF, _ON = ("0", "false", "off", "no"), ("1", "true", "on", "yes", "")
FUSE_BN_SILU = _FUSE not in _OFF
"""Whether a training ``ConvBNAct`` on CUDA fuses its BatchNorm and SiLU where it may."""
FUSE_BN_SILU_ERROR = (
    None
    if _FUSE in _OFF + _ON
    else f"LUCID_FUSE_BN_SILU={_FUSE!r}: expected 1 or 0 (true / false, on / off, yes / no)"
)
"""Why the variable is not read, if it is not: no ``ConvBNAct`` is built under a misspelling."""


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
        if FUSE_BN_SILU_ERROR is not None:
            raise ValueError(FUSE_BN_SILU_ERROR)
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
        y = self.conv(x)
        bn = self.bn
        w, b, mean, var = bn.weight, bn.bias, bn.running_mean, bn.running_var
        if (
            self.training
            and FUSE_BN_SILU
            and type(self.act) is nn.SiLU
            and type(bn) is nn.BatchNorm2d
            and bn.momentum is not None
            and bn.num_batches_tracked is not None
            and w is not None
            and b is not None
            and mean is not None
            and var is not None
            and batch_norm_silu_applies(y, w, b, mean, var)
        ):
            bn.num_batches_tracked.add_(1)
            return batch_norm_silu(y, w, b, mean, var, bn.momentum, bn.eps)
        return self.act(bn(y))  # type: ignore[no-any-return]


def depthwise(in_channels: int, out_channels: int, kernel_size: int = 3) -> ConvBNAct:
    """A ``ConvBNAct`` grouped by ``gcd(C_in, C_out)`` (depthwise when the two are equal)."""
    return ConvBNAct(
        in_channels, out_channels, kernel_size, groups=math.gcd(in_channels, out_channels)
    )
