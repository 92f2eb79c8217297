"""``ConvBN``: convolution without bias, BatchNorm, optional SiLU.

The kernels package's own small block, used to build :class:`~lucid_kernels.SpatialAttention`
and its tests. The attribute names ``conv``/``bn``/``act`` follow the usual YOLO naming so a
state dict lines up with such checkpoints.
"""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["ConvBN"]


class ConvBN(nn.Module):
    """``act(bn(conv(x)))`` with a bias-free ``Conv2d`` and "same" padding for odd kernels.

    Args:
        in_channels: ``C_in``.
        out_channels: ``C_out``; divisible by ``groups``, as is ``C_in``.
        kernel_size: square kernel size ``k``, padded by ``k // 2``.
        stride: convolution stride.
        groups: convolution groups (``groups == C_in == C_out`` is depthwise).
        act: apply SiLU after the BatchNorm when ``True``, nothing when ``False``.
        eps, momentum: the BatchNorm's (PyTorch's defaults unless a model family sets its own).

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
        eps: float = 1e-5,
        momentum: float = 0.1,
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
        self.bn = nn.BatchNorm2d(out_channels, eps=eps, momentum=momentum)
        self.act: nn.Module = nn.SiLU() if act else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C_in, H, W)`` -> ``(B, C_out, H', W')``."""
        return self.act(self.bn(self.conv(x)))  # type: ignore[no-any-return]
