"""The YOLO26 PAN neck: a top-down and a bottom-up path, ending in the attention tail.

Layout (base widths, before scaling)::

    top_down_p4    C3k2(up(P5) ++ P4) -> 512, nested C3k            T4
    top_down_p3    C3k2(up(T4) ++ P3) -> 256, nested C3k            N3  (out, stride 8)
    down_p3        conv 3x3 s2 -> 256
    bottom_up_p4   C3k2(down(N3) ++ T4) -> 512, nested C3k          N4  (out, stride 16)
    down_p4        conv 3x3 s2 -> 512
    bottom_up_p5   C3k2(down(N4) ++ P5) -> 1024, one unit:
                   bottleneck + PSA block (the attention tail)      N5  (out, stride 32)

``up`` is nearest-neighbour resizing to the lateral map's exact size, which is the authors' 2x
upsampling whenever the image side is a multiple of 32 and stays defined when it is not
(assumptions.md M5).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lucid_models.blocks import C3k2
from lucid_models.conv import ConvBNAct
from lucid_models.scales import Scale

__all__ = ["Neck"]


def _up_cat(x: Tensor, lateral: Tensor) -> Tensor:
    """``(B, C1, h, w), (B, C2, H, W) -> (B, C1 + C2, H, W)``, ``x`` resized nearest.

    The resize runs in ``x``'s dtype under autocast too. CUDA autocast lists the nearest
    upsample among its float32 ops, which would make the resized map and the concatenation
    float32 only for the next convolution to cast them back: twice the memory traffic on the
    neck's largest maps, for the same bits (nearest copies values, which half precision holds
    exactly in float32, and its backward sums in float32 for either dtype).
    """
    device = x.device.type  # the meta device (shape inference) has no autocast state to ask
    autocast = device != "meta" and torch.is_autocast_enabled(device)
    with torch.autocast(device, enabled=False) if autocast else contextlib.nullcontext():
        return torch.cat((F.interpolate(x, size=lateral.shape[-2:], mode="nearest"), lateral), 1)


class Neck(nn.Module):
    """PAN over the backbone taps.

    Args:
        scale: the compound-scaling row.

    Attributes:
        out_channels: widths of N3, N4, N5, e.g. ``(64, 128, 256)`` at n.

    Shapes:
        ``(P3, P4, P5)`` -> ``(N3, N4, N5)`` with the same spatial sizes as the inputs.
    """

    def __init__(self, scale: Scale) -> None:
        super().__init__()
        ch, rep = scale.channels, scale.repeats
        self.top_down_p4 = C3k2(ch(1024) + ch(512), ch(512), rep(2), inner="c3k")
        self.top_down_p3 = C3k2(ch(512) + ch(512), ch(256), rep(2), inner="c3k")
        self.down_p3 = ConvBNAct(ch(256), ch(256), 3, 2)
        self.bottom_up_p4 = C3k2(ch(256) + ch(512), ch(512), rep(2), inner="c3k")
        self.down_p4 = ConvBNAct(ch(512), ch(512), 3, 2)
        self.bottom_up_p5 = C3k2(ch(512) + ch(1024), ch(1024), 1, inner="attention")
        self.out_channels = (ch(256), ch(512), ch(1024))

    def forward(self, taps: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """``(P3, P4, P5)`` -> ``(N3, N4, N5)``."""
        p3, p4, p5 = taps
        t4 = self.top_down_p4(_up_cat(p5, p4))
        n3 = self.top_down_p3(_up_cat(t4, p3))
        n4 = self.bottom_up_p4(torch.cat((self.down_p3(n3), t4), 1))
        n5 = self.bottom_up_p5(torch.cat((self.down_p4(n4), p5), 1))
        return n3, n4, n5
