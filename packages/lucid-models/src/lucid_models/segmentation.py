"""Segmentation parts shared by both branches: prototype fusion and net, and the semantic aux head.

Layout (``W`` = the N3 width, which the authors' prototype width always equals)::

    fused  = N3 + up(refine_4(N4)) + up(refine_5(N5))      refine_i: 1x1 ConvBNAct -> W
    protos = out(conv2(upsample(conv1(fuse(fused)))))     fuse, conv1, conv2: 3x3 ConvBNAct
                                                          upsample: 2x2 transposed conv, stride 2
                                                          out: 1x1 ConvBNAct -> M (SiLU, as built)
    semantic = 1x1 conv(3x3 ConvBNAct(3x3 ConvBNAct(fused)))   -> C logits, training only

``up`` resizes nearest to N3's exact size. Prototypes come out at stride 4 (160x160 at 640).
The heads' mask coefficients are raw, with no tanh, as built (assumptions.md M11).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor, nn

from lucid_models.conv import ConvBNAct

__all__ = ["Prototypes", "SemanticHead"]


class Prototypes(nn.Module):
    """Fuse N3..N5 at stride 8 and turn the fused map into ``M`` prototypes at stride 4.

    Args:
        in_channels: widths of N3, N4, N5; the fusion width is N3's.
        num_masks: prototypes ``M``.

    Shapes:
        :meth:`fuse_levels`: ``[(B, C_i, H_i, W_i)]`` -> ``(B, W, H_3, W_3)``;
        ``forward``: ``(B, W, H_3, W_3)`` -> ``(B, M, 2 H_3, 2 W_3)``.
    """

    def __init__(self, in_channels: Sequence[int], num_masks: int) -> None:
        super().__init__()
        width = in_channels[0]
        self.width = width
        self.refine = nn.ModuleList(ConvBNAct(c, width) for c in in_channels[1:])
        self.fuse = ConvBNAct(width, width, 3)
        self.conv1 = ConvBNAct(width, width, 3)
        self.upsample = nn.ConvTranspose2d(width, width, 2, 2, bias=True)
        self.conv2 = ConvBNAct(width, width, 3)
        self.out = ConvBNAct(width, num_masks)

    def fuse_levels(self, feats: Sequence[Tensor]) -> Tensor:
        """``[(B, C_i, H_i, W_i)] x 3`` -> ``(B, W, H_3, W_3)``: N3 plus the refined deeper maps."""
        fused = feats[0]
        for refine, feat in zip(self.refine, feats[1:], strict=True):
            fused = fused + F.interpolate(refine(feat), size=fused.shape[-2:], mode="nearest")
        return fused

    def forward(self, fused: Tensor) -> Tensor:
        """``(B, W, H_3, W_3)`` -> ``(B, M, 2 H_3, 2 W_3)`` prototypes."""
        x = self.upsample(self.conv1(self.fuse(fused)))
        return self.out(self.conv2(x))  # type: ignore[no-any-return]


class SemanticHead(nn.Module):
    """Training-only semantic logits over the fused stride-8 map.

    Shapes:
        ``(B, W, H_3, W_3)`` -> ``(B, C, H_3, W_3)``.
    """

    def __init__(self, width: int, num_classes: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            ConvBNAct(width, width, 3), ConvBNAct(width, width, 3), nn.Conv2d(width, num_classes, 1)
        )

    def forward(self, fused: Tensor) -> Tensor:
        """``(B, W, H_3, W_3)`` -> ``(B, C, H_3, W_3)``."""
        return self.layers(fused)  # type: ignore[no-any-return]
