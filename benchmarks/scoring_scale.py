"""What scoring one validation costs on the host as the set grows (issue 34 item 4).

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/scoring_scale.py \\
        --out OUT --images 500,5000 --classes 80 --detections 300

A validation of a fit scores each decode path by `lucid_train.evaluation.run_cocoeval` (the
compiled scorer, pycocotools' numbers). This times that call alone, for a seeded synthetic set:
``--images`` images of 640 x 480 with ``--objects`` ground-truth boxes each over ``--classes``
categories, and ``--detections`` result rows an image (the e2e path keeps 300), the first of
them near the objects and the rest anywhere, scores rounded to 1/100 (ties, as fp16 gives).
No model and no GPU: the network's share of a validation is the step's, measured elsewhere.
Writes ``OUT/scoring-scale.json`` and prints one line a size: `run_cocoeval`'s seconds for
one decode path (a fit's validation scores two), and the mAP it gave (a check that the rows
match: about 0.01-0.02 here, the near rows being the only hits).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def scene(images: int, classes: int, objects: int, detections: int, seed: int = 0) -> Any:
    """(ground-truth document, result rows) of the synthetic set."""
    rng = np.random.default_rng(seed)
    docs: dict[str, Any] = {
        "images": [{"id": i + 1, "width": 640, "height": 480} for i in range(images)],
        "annotations": [],
        "categories": [{"id": c + 1, "name": str(c + 1)} for c in range(classes)],
    }
    rows: list[dict[str, Any]] = []
    for i in range(images):
        xy = rng.uniform(0, [560, 400], (objects, 2))
        wh = rng.uniform(8, 80, (objects, 2))
        cats = rng.integers(1, classes + 1, objects)
        for box, cat in zip(np.c_[xy, wh].tolist(), cats.tolist(), strict=True):
            docs["annotations"].append({"id": len(docs["annotations"]) + 1, "image_id": i + 1,
                                        "category_id": cat, "bbox": box, "iscrowd": 0,
                                        "area": box[2] * box[3]})  # fmt: skip
        boxes = np.c_[rng.uniform(0, [560, 400], (detections, 2)),
                      rng.uniform(8, 80, (detections, 2))]  # fmt: skip
        labels = rng.integers(1, classes + 1, detections)
        near = min(objects, detections)
        boxes[:near] = np.c_[xy[:near] + rng.normal(0, 2, (near, 2)), wh[:near]]
        labels[:near] = cats[:near]
        scores = np.round(rng.random(detections), 2)
        rows.extend({"image_id": i + 1, "category_id": c, "bbox": b, "score": s}
                    for b, c, s in zip(boxes.tolist(), labels.tolist(), scores.tolist(),
                                       strict=True))  # fmt: skip
    return docs, rows


def measure(images: int, args: argparse.Namespace) -> dict[str, Any]:
    from lucid_train.evaluation.coco_eval import coco_from_dict, run_cocoeval

    doc, rows = scene(images, args.classes, args.objects, args.detections)
    gt = coco_from_dict(doc)
    start = time.perf_counter()
    stats = run_cocoeval(gt, rows, "bbox")
    scored = time.perf_counter() - start
    return {"images": images, "detections": len(rows), "run_cocoeval_s": round(scored, 2),
            "mAP50-95": round(stats["mAP"], 4)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--images", default="500,5000", help="comma list of set sizes")
    parser.add_argument("--classes", type=int, default=80)
    parser.add_argument("--objects", type=int, default=7, help="ground-truth boxes an image")
    parser.add_argument("--detections", type=int, default=300, help="result rows an image")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([sys.executable, *sys.argv]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "rows": [],
    }
    for images in [int(n) for n in args.images.split(",") if n]:
        row = measure(images, args)
        doc["rows"].append(row)
        print(json.dumps(row), flush=True)
        (args.out / "scoring-scale.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
