"""The YOLO26 head: two branches with disjoint parameters over the same neck features.

Per branch and per level (N3, N4, N5 of width ``C_i``; ``C_0`` is N3's width)::

    box      3x3 ConvBNAct -> w, 3x3 ConvBNAct, 1x1 conv -> 4       w = max(16, C_0 // 4)
    class    [dw 3x3, 1x1 -> w], [dw 3x3, 1x1], 1x1 conv -> C       w = max(C_0, min(C, 100))
    segment  mask: 3x3, 3x3, 1x1 -> M                               w = max(C_0 // 4, M)
    obb      angle: 3x3, 3x3, 1x1 -> 1                              w = max(C_0 // 4, 1)
    pose     trunk: 3x3, 3x3; keypoints 1x1 -> 3K; sigma 1x1 -> 2K  w = max(C_0 // 4, 5K)

These are the authors' widths (assumptions.md M6). DFL-free: the box stem emits 4 raw distances.
The one-to-one branch starts as an exact copy of the one-to-many branch, as the authors' deep
copy does, and reads detached features (assumptions.md M7).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from lucid_models.anchors import STRIDES, make_anchors
from lucid_models.conv import ConvBNAct, depthwise
from lucid_models.outputs import BranchOutput, ModelOutput, Task
from lucid_models.segmentation import Prototypes, SemanticHead

__all__ = ["Branch", "Head", "build_branch"]

NUM_MASKS = 32
BOX_BIAS = 2.0  # the authors' initial ltrb distance (stride units): a 4-stride box per anchor


def class_bias_prior(num_classes: int, stride: int, image_size: int = 640) -> float:
    """Initial class-logit bias: about 5 objects per 640 px image, spread over the classes.

    ``log(5 / C / (640 / stride) ** 2)``, the authors' prior (assumptions.md M8).
    """
    return math.log(5 / num_classes / (image_size / stride) ** 2)


def _output_conv(c_in: int, c_out: int, bias: float | None) -> nn.Conv2d:
    conv = nn.Conv2d(c_in, c_out, 1)
    if bias is not None and conv.bias is not None:
        nn.init.constant_(conv.bias, bias)
    return conv


def _conv_stem(c_in: int, width: int, c_out: int, bias: float | None = None) -> nn.Sequential:
    return nn.Sequential(
        ConvBNAct(c_in, width, 3), ConvBNAct(width, width, 3), _output_conv(width, c_out, bias)
    )


def _class_stem(c_in: int, width: int, num_classes: int, bias: float) -> nn.Sequential:
    return nn.Sequential(
        nn.Sequential(depthwise(c_in, c_in), ConvBNAct(c_in, width)),
        nn.Sequential(depthwise(width, width), ConvBNAct(width, width)),
        _output_conv(width, num_classes, bias),
    )


def _flatten(maps: Sequence[Tensor]) -> Tensor:
    """Per-level ``(B, c, h, w)`` -> ``(B, A, c)``, levels concatenated, each row-major."""
    return torch.cat([m.flatten(2) for m in maps], dim=2).transpose(1, 2)


class Branch(nn.Module):
    """One branch: per-level stems for boxes and classes, plus the task's own stem.

    Stems are passed in (see :func:`build_branch`), so a view can share them.

    Shapes:
        ``feats``: ``[(B, C_i, H_i, W_i)] x 3`` -> :class:`BranchOutput` over ``A = sum H_i W_i``.
    """

    def __init__(
        self,
        box: nn.ModuleList,
        cls: nn.ModuleList,
        *,
        mask: nn.ModuleList | None = None,
        angle: nn.ModuleList | None = None,
        keypoint_trunk: nn.ModuleList | None = None,
        keypoints: nn.ModuleList | None = None,
        keypoint_sigma: nn.ModuleList | None = None,
    ) -> None:
        super().__init__()
        self.box = box
        self.cls = cls
        self.mask = mask
        self.angle = angle
        self.keypoint_trunk = keypoint_trunk
        self.keypoints = keypoints
        self.keypoint_sigma = keypoint_sigma

    def inference_view(self) -> Branch:
        """A branch sharing these stems without the training-only keypoint sigma."""
        return Branch(
            self.box,
            self.cls,
            mask=self.mask,
            angle=self.angle,
            keypoint_trunk=self.keypoint_trunk,
            keypoints=self.keypoints,
        )

    def forward(self, feats: Sequence[Tensor]) -> BranchOutput:
        """``[(B, C_i, H_i, W_i)] x 3`` -> :class:`BranchOutput`."""
        out = BranchOutput(
            boxes=_flatten([m(f) for m, f in zip(self.box, feats, strict=True)]),
            logits=_flatten([m(f) for m, f in zip(self.cls, feats, strict=True)]),
        )
        if self.mask is not None:
            out.mask_coefficients = _flatten([m(f) for m, f in zip(self.mask, feats, strict=True)])
        if self.angle is not None:
            angle = _flatten([m(f) for m, f in zip(self.angle, feats, strict=True)])
            out.angles = angle.squeeze(-1)  # (B, A)
        if self.keypoint_trunk is not None and self.keypoints is not None:
            trunk = [m(f) for m, f in zip(self.keypoint_trunk, feats, strict=True)]
            kpts = _flatten([m(t) for m, t in zip(self.keypoints, trunk, strict=True)])
            out.keypoints = kpts.reshape(*kpts.shape[:2], -1, 3)  # (B, A, K, 3)
            if self.keypoint_sigma is not None:
                sigma = _flatten([m(t) for m, t in zip(self.keypoint_sigma, trunk, strict=True)])
                out.keypoint_sigmas = sigma.reshape(*sigma.shape[:2], -1, 2)  # (B, A, K, 2)
        return out


def build_branch(
    in_channels: Sequence[int],
    task: Task,
    num_classes: int,
    *,
    num_keypoints: int | None = None,
    strides: Sequence[int] = STRIDES,
) -> Branch:
    """A freshly initialised :class:`Branch` with the authors' widths and bias priors.

    Args:
        in_channels: widths of N3, N4, N5.
        task: which task stem to add.
        num_classes: ``C``.
        num_keypoints: ``K``, required for pose.
        strides: level strides, for the class bias prior.
    """
    if len(in_channels) != len(strides):
        raise ValueError(f"expected one stride per level, got {in_channels} and {strides}")
    c0 = in_channels[0]
    w_box, w_cls = max(16, c0 // 4), max(c0, min(num_classes, 100))
    box = nn.ModuleList(_conv_stem(c, w_box, 4, BOX_BIAS) for c in in_channels)
    cls = nn.ModuleList(
        _class_stem(c, w_cls, num_classes, class_bias_prior(num_classes, s))
        for c, s in zip(in_channels, strides, strict=True)
    )
    if task == "segment":
        w = max(c0 // 4, NUM_MASKS)
        mask = nn.ModuleList(_conv_stem(c, w, NUM_MASKS) for c in in_channels)
        return Branch(box, cls, mask=mask)
    if task == "obb":
        w = max(c0 // 4, 1)
        return Branch(box, cls, angle=nn.ModuleList(_conv_stem(c, w, 1) for c in in_channels))
    if task == "pose":
        if num_keypoints is None or num_keypoints < 1:
            raise ValueError(f"pose needs num_keypoints >= 1 from the dataset, got {num_keypoints}")
        K = num_keypoints
        w = max(c0 // 4, 5 * K)
        return Branch(
            box,
            cls,
            keypoint_trunk=nn.ModuleList(
                nn.Sequential(ConvBNAct(c, w, 3), ConvBNAct(w, w, 3)) for c in in_channels
            ),
            keypoints=nn.ModuleList(nn.Conv2d(w, 3 * K, 1) for _ in in_channels),
            keypoint_sigma=nn.ModuleList(nn.Conv2d(w, 2 * K, 1) for _ in in_channels),
        )
    return Branch(box, cls)


class Head(nn.Module):
    """Both branches, and for segmentation the prototypes and the semantic aux head.

    Args:
        in_channels: widths of N3, N4, N5.
        task: ``"detect"``, ``"segment"``, ``"pose"`` or ``"obb"``.
        num_classes: ``C``.
        num_keypoints: ``K``, required for pose.

    Shapes:
        ``feats``: ``[(B, C_i, H_i, W_i)] x 3`` -> :class:`ModelOutput`.
    """

    def __init__(
        self,
        in_channels: Sequence[int],
        task: Task,
        num_classes: int,
        *,
        num_keypoints: int | None = None,
    ) -> None:
        super().__init__()
        self.strides = STRIDES
        self.one2many = build_branch(in_channels, task, num_classes, num_keypoints=num_keypoints)
        self.one2one = build_branch(in_channels, task, num_classes, num_keypoints=num_keypoints)
        self.one2one.load_state_dict(self.one2many.state_dict())
        self.prototypes: Prototypes | None = None
        self.semantic: SemanticHead | None = None
        if task == "segment":
            self.prototypes = Prototypes(in_channels, NUM_MASKS)
            self.semantic = SemanticHead(self.prototypes.width, num_classes)

    def forward(self, feats: Sequence[Tensor]) -> ModelOutput:
        """``[(B, C_i, H_i, W_i)] x 3`` -> :class:`ModelOutput`."""
        one2many = self.one2many(feats)
        one2one = self.one2one([f.detach() for f in feats])
        points, strides = make_anchors(
            [(f.shape[-2], f.shape[-1]) for f in feats],
            self.strides,
            device=feats[0].device,
            dtype=torch.float32,  # float32 even under autocast: bf16 cannot hold 80.5
        )
        out = ModelOutput(one2one, one2many, points, strides)
        if self.prototypes is not None:
            fused = self.prototypes.fuse_levels(feats)
            out.prototypes = self.prototypes(fused)
            if self.training and self.semantic is not None:
                out.semantic_logits = self.semantic(fused)
        return out
