"""The NMS decode of one validation batch, as validation calls it: `nms_decode` of a yolo26n's
one-to-many output, single-label and multi-label (the authors' validation), timed to its result.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/nms_decode_speed.py \\
        --out OUT [--batch 16 --size 320 --candidates 250 --device cpu]

The network's own outputs at ``--size`` (random weights), with each image's class logits set
low but for ``--candidates`` anchors of random class and logit: a trained model's few above the
0.001 score floor, not an untrained one's flood. One image in eight has none. Median of
``--repeats`` timed calls (after warm-up), the device synchronised before and after each, and
the number of torch operations one call runs (the profiler's count). Writes
``OUT/nms-decode.json``; run it against two trees' ``packages`` to compare them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from lucid_models import build_model, nms_decode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=320)
    parser.add_argument("--candidates", type=int, default=250)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = build_model("yolo26n", task="detect", num_classes=4).eval().to(args.device)
    with torch.no_grad():
        output = model(torch.rand(args.batch, 3, args.size, args.size, device=args.device))
    branch = output.one2many
    assert branch is not None
    logits = torch.full_like(branch.logits, -12.0)
    g = torch.Generator().manual_seed(0)
    anchors = logits.shape[1]
    for b in range(args.batch):
        if b % 8 == 7:
            continue
        at = torch.randperm(anchors, generator=g)[: args.candidates]
        cls = torch.randint(0, logits.shape[2], (len(at),), generator=g)
        logits[b, at.to(args.device), cls.to(args.device)] = (
            torch.randn(len(at), generator=g) * 2
        ).to(args.device)
    branch.logits = logits
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    rows = []
    for multi_label in (False, True):
        for _ in range(5):
            det = nms_decode(output, multi_label=multi_label)
        times = []
        for _ in range(args.repeats):
            sync()
            start = time.perf_counter()
            det = nms_decode(output, multi_label=multi_label)
            sync()
            times.append((time.perf_counter() - start) * 1e3)
        with torch.profiler.profile() as prof:
            nms_decode(output, multi_label=multi_label)
        row = {
            "multi_label": multi_label, "ms_median": round(statistics.median(times), 3),
            "ms_min": round(min(times), 3), "torch_ops": sum(e.count for e in prof.key_averages()),
            "kept": int((det.labels >= 0).sum()), "boxes_sum": float(det.boxes.double().sum()),
        }  # fmt: skip
        rows.append(row)
        print(row, flush=True)
    meta = {
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "torch": torch.__version__, "batch": args.batch, "size": args.size,
        "candidates": args.candidates, "repeats": args.repeats,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "nms-decode.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
