"""Class-wise box NMS: lucid-models' `batched_nms` and its two passes against torchvision's.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/nms_speed.py --out OUT

For each case (candidates an image, classes, scene), boxes scattered around ground-truth-like
objects as a detector's one-to-many branch gives them (several jittered boxes per object, plus
background boxes), scores distinct: both functions' kept indices are compared (the same boxes,
in the same order, up to ``max_keep`` = 300 at IoU 0.7, the validation's settings), and each is
timed as validation calls it (one image, the result's indices on the host: the decode pads them
into a batch), median of ``--repeats`` calls: `batched_nms` as shipped, its own block pass alone
(``KERNEL_MAX`` emptied), and torchvision's ``batched_nms``; the cases around
``lucid_models.nms.KERNEL_MAX`` place that threshold. Writes ``OUT/nms-speed.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torchvision

from lucid_models import batched_nms, nms

CASES = (  # (candidates, classes, objects): an untrained model's flood, a trained one's few
    (30_000, 80, 50),
    (8_400, 4, 20),
    (6_000, 4, 20),
    (4_000, 4, 20),
    (2_000, 4, 20),
    (300, 80, 10),
)


def scene(
    n: int, classes: int, objects: int, g: torch.Generator, device: str
) -> tuple[torch.Tensor, ...]:
    """``n`` boxes (xyxy, 640 px plane), distinct scores and labels: a third jittered around
    ``objects`` centres (heavy overlap, what NMS removes), the rest anywhere."""
    centres = torch.rand(objects, 2, generator=g) * 600 + 20
    sizes = torch.rand(objects, 2, generator=g) * 120 + 8
    near = n // 3
    pick = torch.randint(0, objects, (near,), generator=g)
    xy = centres[pick] + torch.randn(near, 2, generator=g) * sizes[pick] * 0.1
    wh = sizes[pick] * (1 + torch.randn(near, 2, generator=g) * 0.1).clamp(min=0.3)
    far_xy = torch.rand(n - near, 2, generator=g) * 640
    far_wh = torch.rand(n - near, 2, generator=g) * 100 + 2
    xy, wh = torch.cat([xy, far_xy]), torch.cat([wh, far_wh])
    boxes = torch.cat([xy - wh / 2, xy + wh / 2], 1)
    scores = torch.randperm(n, generator=g).float() / n  # distinct: no ties to order
    labels = torch.cat([pick % classes, torch.randint(0, classes, (n - near,), generator=g)])
    return boxes.to(device), scores.to(device), labels.to(device)


def torchvision_nms(
    boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor, iou: float, keep: int
) -> torch.Tensor:
    return torchvision.ops.batched_nms(boxes.float(), scores, labels, iou)[:keep]


def blocks_nms(
    boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor, iou: float, keep: int
) -> torch.Tensor:
    shipped, nms.KERNEL_MAX = nms.KERNEL_MAX, {}
    try:
        return batched_nms(boxes, scores, labels, iou, keep)
    finally:
        nms.KERNEL_MAX = shipped


def timed_ms(fn: Any, args: tuple[Any, ...], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn(*args).cpu()  # the indices reach the host, as the decode's padding needs them
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    rows = []
    for n, classes, objects in CASES:
        boxes, scores, labels = scene(n, classes, objects, g, args.device)
        call = (boxes, scores, labels, 0.7, 300)
        ours, theirs = batched_nms(*call).cpu(), torchvision_nms(*call).cpu()
        same = bool(torch.equal(ours, theirs))
        blocks_same = bool(torch.equal(ours, blocks_nms(*call).cpu()))
        for fn in (batched_nms, blocks_nms, torchvision_nms):  # warm-up: kernels, allocator
            fn(*call)
        row = {
            "candidates": n, "classes": classes, "objects": objects, "kept": len(ours),
            "same_boxes": same, "first_difference": None if same else int(
                next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                     min(len(ours), len(theirs)))),
            "blocks_same_boxes": blocks_same,
            "lucid_ms": round(timed_ms(batched_nms, call, args.repeats), 3),
            "lucid_blocks_ms": round(timed_ms(blocks_nms, call, args.repeats), 3),
            "torchvision_ms": round(timed_ms(torchvision_nms, call, args.repeats), 3),
        }  # fmt: skip
        rows.append(row)
        print(row, flush=True)
    meta = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
        "torch": torch.__version__, "torchvision": torchvision.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "repeats": args.repeats,
        "kernel_max": nms.KERNEL_MAX,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "nms-speed.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
