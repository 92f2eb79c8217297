"""The assigner's pairwise Complete IoU in one pass over the anchors, on CUDA through Triton.

Why: the task-aligned assigner scores every (ground truth, anchor) pair, ``(B, M, A)`` at fixed
capacity for a recorded step (64 x 24 x 8,400 pairs at batch 64, 640 px). Written elementwise
in torch that is some forty kernels, each writing and reading the whole matrix back: about
2.1 ms of device time a step at batch 64 on an H100 against 0.27 ms in one pass
(`benchmarks/assigner_overlap.py`, docs/benchmarks/peer-speed.md).

Contract:
    * ``ciou_kernel(gt, pred, eps)`` equals ``box_ciou(gt[:, :, None], pred[:, None]).clamp(min=0)``
      of the elementwise form (lucid-train's ``assign.overlaps``) bit for bit: the same float32
      operations in the same order, no fused multiply-add (``enable_fp_fusion=False``), division
      correctly rounded (``div_rn``) as torch divides, and the two ``atan`` terms computed per
      box by torch, as the elementwise form does. Held on the CPU under Triton's interpreter and
      on CUDA against the elementwise form.
    * No autograd: the assigner's overlaps carry no gradient. `ciou_kernel_applies` says when
      the kernel may stand in (CUDA float32 tensors that need no gradient, Triton installed).
"""

from __future__ import annotations

import math
from typing import Any

import torch

try:
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    HAVE_TRITON = True
except ImportError:  # a CPU-only install: the elementwise form serves
    HAVE_TRITON = False

__all__ = ["ciou_kernel", "ciou_kernel_applies"]

BLOCK = 256  # anchors a program: 8,400 at 640 px is 33 programs a ground truth
ASPECT = 4 / math.pi**2


def ciou_kernel_applies(*boxes: torch.Tensor) -> bool:
    """Whether `ciou_kernel` may compute the pairwise CIoU of these boxes."""
    return (
        HAVE_TRITON
        and all(b.is_cuda and b.dtype == torch.float32 for b in boxes)
        and not (torch.is_grad_enabled() and any(b.requires_grad for b in boxes))
    )


def ciou_kernel(gt_boxes: torch.Tensor, pred_boxes: torch.Tensor, eps: float) -> torch.Tensor:
    """``(B, M, A)`` CIoU of ``(B, M, 4)`` against ``(B, A, 4)`` xyxy float32 boxes, clamped at 0.

    On CUDA the kernel is compiled; elsewhere it runs only under ``TRITON_INTERPRET=1`` (its
    tests), where division is numpy's, which is IEEE too.
    """
    if not HAVE_TRITON:
        raise RuntimeError("ciou_kernel needs Triton (installed with torch's CUDA wheels)")
    if gt_boxes.is_cuda and gt_boxes.get_device() != torch.cuda.current_device():
        with torch.cuda.device(gt_boxes.device):  # Triton launches on the current device
            return ciou_kernel(gt_boxes, pred_boxes, eps)
    gt, pred = gt_boxes.float().contiguous(), pred_boxes.float().contiguous()
    b, m, _ = gt.shape
    anchors = pred.shape[1]
    gt_atan = torch.atan((gt[..., 2] - gt[..., 0]) / (gt[..., 3] - gt[..., 1] + eps))
    pred_atan = torch.atan((pred[..., 2] - pred[..., 0]) / (pred[..., 3] - pred[..., 1] + eps))
    out = torch.empty(b, m, anchors, device=gt.device, dtype=torch.float32)
    on_device = gt.is_cuda
    options: dict[str, Any] = {"enable_fp_fusion": False} if on_device else {}
    grid = (b * m, triton.cdiv(anchors, BLOCK))
    _ciou[grid](
        gt, gt_atan.contiguous(), pred, pred_atan.contiguous(), out, m, anchors, eps, ASPECT,
        block=BLOCK, rn=on_device, **options,
    )  # fmt: skip
    return out


if HAVE_TRITON:

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def _div(a, b, rn: tl.constexpr):  # type: ignore[no-untyped-def]
        # correctly rounded, as torch divides (the interpreter has no libdevice)
        if rn:
            return libdevice.div_rn(a, b)
        return a / b

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def _ciou(  # type: ignore[no-untyped-def]
        gt_ptr, gt_atan_ptr, pred_ptr, pred_atan_ptr, out_ptr, rows, anchors, eps, aspect,
        block: tl.constexpr, rn: tl.constexpr,
    ):  # fmt: skip
        row = tl.program_id(0)  # one (image, ground truth) pair
        image = row // rows
        a = tl.program_id(1) * block + tl.arange(0, block)
        keep = a < anchors
        g = gt_ptr + row * 4
        b1x1, b1y1, b1x2, b1y2 = tl.load(g), tl.load(g + 1), tl.load(g + 2), tl.load(g + 3)
        atan1 = tl.load(gt_atan_ptr + row)
        p = pred_ptr + (image * anchors + a) * 4
        b2x1 = tl.load(p, mask=keep, other=0.0)
        b2y1 = tl.load(p + 1, mask=keep, other=0.0)
        b2x2 = tl.load(p + 2, mask=keep, other=0.0)
        b2y2 = tl.load(p + 3, mask=keep, other=0.0)
        atan2 = tl.load(pred_atan_ptr + image * anchors + a, mask=keep, other=0.0)
        # the elementwise form's operations, in its order (lucid-train's overlaps.box_ciou)
        w1, h1 = b1x2 - b1x1, b1y2 - b1y1 + eps
        w2, h2 = b2x2 - b2x1, b2y2 - b2y1 + eps
        iw = tl.maximum(tl.minimum(b1x2, b2x2) - tl.maximum(b1x1, b2x1), 0.0)
        ih = tl.maximum(tl.minimum(b1y2, b2y2) - tl.maximum(b1y1, b2y1), 0.0)
        inter = iw * ih
        iou = _div(inter, w1 * h1 + w2 * h2 - inter + eps, rn)
        cw = tl.maximum(b1x2, b2x2) - tl.minimum(b1x1, b2x1)
        ch = tl.maximum(b1y2, b2y2) - tl.minimum(b1y1, b2y1)
        c2 = cw * cw + ch * ch + eps
        dx = b2x1 + b2x2 - b1x1 - b1x2
        dy = b2y1 + b2y2 - b1y1 - b1y2
        rho2 = _div(dx * dx + dy * dy, 4.0, rn)
        d = atan2 - atan1
        v = aspect * (d * d)
        alpha = _div(v, 1.0 - iou + v + eps, rn)
        ciou = iou - (_div(rho2, c2, rn) + v * alpha)
        tl.store(out_ptr + row * anchors + a, tl.maximum(ciou, 0.0), mask=keep)
