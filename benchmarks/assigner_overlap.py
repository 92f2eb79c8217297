"""The assigner's pairwise CIoU in one fused pass, against the elementwise path it would replace
(issue 34: our assigner costs 7.8 ms a step against the authors' 2.4 at batch 64, most of it the
dense CIoU written and read back kernel by kernel; `docs/benchmarks/peer-speed.md`).

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/assigner_overlap.py --out OUT

A prototype, not used by training: a Triton kernel computes `lucid_train.assign.overlaps.
pairwise_ciou` for one ground truth and a block of anchors per program, in the same order of
float32 operations (no fused multiply-add, correctly rounded division; the two ``atan`` terms
computed per box by torch, as the elementwise path does), so it should keep the elementwise
path's bits. On CUDA the script checks that, bit for bit, and times both by CUDA events at the
step profile's shapes; it writes ``OUT/assigner-overlap.json``. On the CPU the kernel runs under
Triton's interpreter (``TRITON_INTERPRET=1``), which is how its test checks the arithmetic.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl
from step_timing import median_step_ms
from triton.language.extra import libdevice

from lucid_train.assign.overlaps import EPS, pairwise_ciou

BLOCK = 256  # anchors a program: 8,400 at 640 px is 33 programs a ground truth
ASPECT = 4 / math.pi**2


@triton.jit
def _div(a, b, rn: tl.constexpr):
    # correctly rounded, as torch divides (the interpreter has no libdevice; numpy's is IEEE)
    if rn:
        return libdevice.div_rn(a, b)
    return a / b


@triton.jit
def _ciou_kernel(
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
    # the elementwise path's operations, in its order (overlaps.box_ciou)
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


def fused_pairwise_ciou(gt_boxes: torch.Tensor, pred_boxes: torch.Tensor) -> torch.Tensor:
    """`pairwise_ciou` of ``(B, M, 4)`` against ``(B, A, 4)`` xyxy float32 boxes, one pass."""
    gt, pred = gt_boxes.float().contiguous(), pred_boxes.float().contiguous()
    b, m, _ = gt.shape
    anchors = pred.shape[1]
    # the aspect terms per box, by torch, as the elementwise path computes them
    gt_atan = torch.atan((gt[..., 2] - gt[..., 0]) / (gt[..., 3] - gt[..., 1] + EPS)).contiguous()
    pred_w, pred_h = pred[..., 2] - pred[..., 0], pred[..., 3] - pred[..., 1] + EPS
    pred_atan = torch.atan(pred_w / pred_h).contiguous()
    out = torch.empty(b, m, anchors, device=gt.device, dtype=torch.float32)
    grid = (b * m, triton.cdiv(anchors, BLOCK))
    on_device = gt.device.type == "cuda"
    options = {"enable_fp_fusion": False} if on_device else {}  # no fused multiply-add
    _ciou_kernel[grid](
        gt, gt_atan, pred, pred_atan, out, m, anchors, EPS, ASPECT, block=BLOCK, rn=on_device,
        **options,
    )  # fmt: skip
    return out


def random_boxes(
    b: int, m: int, anchors: int, device: torch.device, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ground truth and predictions over a 640 px canvas, some predictions inverted (an early
    head's raw distances) and some ground truth tiny."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(b, m, 2, generator=g) * 600
    wh = torch.rand(b, m, 2, generator=g) ** 3 * 300 + 1
    gt = torch.cat([xy, xy + wh], -1)
    centre = torch.rand(b, anchors, 2, generator=g) * 640
    half = torch.rand(b, anchors, 2, generator=g) * 80 - 8  # a tenth of them inverted
    pred = torch.cat([centre - half, centre + half], -1)
    return gt.to(device), pred.to(device)


def _time_ms(fn: Callable[[], object], reps: int) -> float:
    for _ in range(3):  # the kernel's compilation and the allocator's first blocks
        fn()
    return median_step_ms(fn, reps)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default="64x24x8400,16x24x8400,64x24x2100")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    rows = []
    for shape in args.shapes.split(","):
        b, m, anchors = (int(x) for x in shape.split("x"))
        gt, pred = random_boxes(b, m, anchors, device)
        ref, fused = pairwise_ciou(gt, pred), fused_pairwise_ciou(gt, pred)
        same = ref.view(torch.int32) == fused.view(torch.int32)
        times = {name: round(_time_ms(lambda f=fn, g=gt, p=pred: f(g, p), args.reps), 3)
                 for name, fn in (("elementwise_ms", pairwise_ciou),
                                  ("fused_ms", fused_pairwise_ciou))}  # fmt: skip
        rows.append({
            "shape": shape,
            "bitwise_equal_share": same.float().mean().item(),
            "max_abs_diff": (ref - fused).abs().max().item(),
            **times,
        })  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__, "rows": rows}  # fmt: skip
    (args.out / "assigner-overlap.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
