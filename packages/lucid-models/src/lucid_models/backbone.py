"""The YOLO26 backbone: strided convs and C3k2 stages, SPPF and C2PSA, with three taps.

Layout (base widths, before scaling)::

    stem      conv 3x3 s2 -> 64                       stride 2
    down_p2   conv 3x3 s2 -> 128                      stride 4
    c3k2_p2   C3k2 -> 256, expansion 0.25
    down_p3   conv 3x3 s2 -> 256                      stride 8
    c3k2_p3   C3k2 -> 512, expansion 0.25             -> P3 tap
    down_p4   conv 3x3 s2 -> 512                      stride 16
    c3k2_p4   C3k2 -> 512, nested C3k                 -> P4 tap
    down_p5   conv 3x3 s2 -> 1024                     stride 32
    c3k2_p5   C3k2 -> 1024, nested C3k
    sppf      SPPF (k 5, 3 pools, residual)
    c2psa     C2PSA (the P5 attention block)          -> P5 tap

The two shallow C3k2 stages nest C3k units at m, l and x only, as the authors' builds do.
"""

from __future__ import annotations

from torch import Tensor, nn

from lucid_models.attention import C2PSA
from lucid_models.blocks import SPPF, C3k2, InnerUnit
from lucid_models.conv import ConvBNAct
from lucid_models.scales import Scale

__all__ = ["Backbone"]


class Backbone(nn.Module):
    """Image to the refined P3, P4 and P5 maps (strides 8, 16, 32).

    Args:
        scale: the compound-scaling row.
        in_channels: image channels.

    Attributes:
        out_channels: widths of the three taps, e.g. ``(128, 128, 256)`` at n.

    Shapes:
        ``images``: ``(B, 3, H, W)`` -> three maps ``(B, C_i, ceil(H / s), ceil(W / s))`` for
        ``s`` in 8, 16, 32.
    """

    def __init__(self, scale: Scale, in_channels: int = 3) -> None:
        super().__init__()
        ch, rep = scale.channels, scale.repeats
        shallow: InnerUnit = "c3k" if scale.nested_c3k else "bottleneck"
        self.stem = ConvBNAct(in_channels, ch(64), 3, 2)
        self.down_p2 = ConvBNAct(ch(64), ch(128), 3, 2)
        self.c3k2_p2 = C3k2(ch(128), ch(256), rep(2), inner=shallow, expansion=0.25)
        self.down_p3 = ConvBNAct(ch(256), ch(256), 3, 2)
        self.c3k2_p3 = C3k2(ch(256), ch(512), rep(2), inner=shallow, expansion=0.25)
        self.down_p4 = ConvBNAct(ch(512), ch(512), 3, 2)
        self.c3k2_p4 = C3k2(ch(512), ch(512), rep(2), inner="c3k")
        self.down_p5 = ConvBNAct(ch(512), ch(1024), 3, 2)
        self.c3k2_p5 = C3k2(ch(1024), ch(1024), rep(2), inner="c3k")
        self.sppf = SPPF(ch(1024), ch(1024))
        self.c2psa = C2PSA(ch(1024), rep(2))
        self.out_channels = (ch(512), ch(512), ch(1024))

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(B, 3, H, W)`` -> ``(P3, P4, P5)``."""
        x = self.c3k2_p2(self.down_p2(self.stem(images)))
        p3 = self.c3k2_p3(self.down_p3(x))
        p4 = self.c3k2_p4(self.down_p4(p3))
        p5 = self.c2psa(self.sppf(self.c3k2_p5(self.down_p5(p4))))
        return p3, p4, p5
