"""The assigner's pairwise CIoU in one fused pass (`lucid_kernels.ciou_kernel`, which
`lucid_train.assign.overlaps.pairwise_ciou` uses on CUDA) against the elementwise form it stands
in for (issue 34: our assigner cost 7.8 ms a step against the authors' 2.4 at batch 64, 2.1 ms
of it the dense CIoU written and read back kernel by kernel; `docs/benchmarks/peer-speed.md`).

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/assigner_overlap.py --out OUT

On CUDA the script counts the elements whose bits differ between the two and times both by
CUDA events at the step profile's shapes; it writes ``OUT/assigner-overlap.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import triton
from step_timing import median_step_ms

from lucid_kernels import ciou_kernel
from lucid_train.assign.overlaps import EPS, box_ciou


def fused_pairwise_ciou(gt_boxes: torch.Tensor, pred_boxes: torch.Tensor) -> torch.Tensor:
    """`pairwise_ciou` of ``(B, M, 4)`` against ``(B, A, 4)`` xyxy float32 boxes, one pass."""
    return ciou_kernel(gt_boxes, pred_boxes, EPS)


def elementwise_ciou(gt_boxes: torch.Tensor, pred_boxes: torch.Tensor) -> torch.Tensor:
    """The torch form the kernel stands in for (`pairwise_ciou` off CUDA)."""
    return box_ciou(gt_boxes.unsqueeze(2), pred_boxes.unsqueeze(1)).clamp(min=0)


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
        ref, fused = elementwise_ciou(gt, pred), fused_pairwise_ciou(gt, pred)
        differ = int((ref.view(torch.int32) != fused.view(torch.int32)).sum())
        times = {name: round(_time_ms(lambda f=fn, g=gt, p=pred: f(g, p), args.reps), 3)
                 for name, fn in (("elementwise_ms", elementwise_ciou),
                                  ("fused_ms", fused_pairwise_ciou))}  # fmt: skip
        rows.append({
            "shape": shape,
            "bits_differing": differ,
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
