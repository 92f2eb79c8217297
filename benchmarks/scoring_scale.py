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

Each size is also scored the way a validation feeds the scorer: ``CocoEvaluator.add`` once an
image from arrays, as `ValidationScorer.update` does batch by batch (``add_s``), then
``compute`` (``compute_s``). With ``--heap-model yolo26n`` that model's training module is
built in the process first, so Python's garbage collector has a fit's worth of model objects
to walk whenever it runs, as it does inside a fit.
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
    doc, per_image = scene_arrays(images, classes, objects, detections, seed)
    rows: list[dict[str, Any]] = []
    for image_id, xyxy, scores, labels in per_image:
        xywh = np.c_[xyxy[:, :2], xyxy[:, 2:] - xyxy[:, :2]]
        rows.extend({"image_id": image_id, "category_id": c + 1, "bbox": b, "score": s}
                    for b, c, s in zip(xywh.tolist(), labels.tolist(), scores.tolist(),
                                       strict=True))  # fmt: skip
    return doc, rows


def scene_arrays(images: int, classes: int, objects: int, detections: int, seed: int = 0) -> Any:
    """(ground-truth document, ``[(image id, (D, 4) xyxy, (D,) scores, (D,) contiguous
    labels)]`` an image): the rows as a validation hands them to `CocoEvaluator.add`."""
    rng = np.random.default_rng(seed)
    docs: dict[str, Any] = {
        "images": [{"id": i + 1, "width": 640, "height": 480} for i in range(images)],
        "annotations": [],
        "categories": [{"id": c + 1, "name": str(c + 1)} for c in range(classes)],
    }
    per_image: list[tuple[int, Any, Any, Any]] = []
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
        xyxy = np.c_[boxes[:, :2], boxes[:, :2] + boxes[:, 2:]]
        per_image.append((i + 1, xyxy, scores, labels - 1))
    return docs, per_image


def measure(images: int, args: argparse.Namespace) -> dict[str, Any]:
    from lucid_train.evaluation.coco_eval import CocoEvaluator, coco_from_dict, run_cocoeval

    doc, rows = scene(images, args.classes, args.objects, args.detections)
    gt = coco_from_dict(doc)
    start = time.perf_counter()
    stats = run_cocoeval(gt, rows, "bbox")
    scored = time.perf_counter() - start
    del rows
    _, per_image = scene_arrays(images, args.classes, args.objects, args.detections)
    evaluator = CocoEvaluator(doc, list(range(1, args.classes + 1)), index=gt)
    start = time.perf_counter()
    for image_id, xyxy, scores, labels in per_image:
        evaluator.add(image_id, xyxy, scores, labels)
    added = time.perf_counter()
    again = evaluator.compute()["bbox"]
    computed = time.perf_counter()
    return {"images": images, "detections": images * args.detections,
            "run_cocoeval_s": round(scored, 2), "mAP50-95": round(stats["mAP"], 4),
            "add_s": round(added - start, 2), "compute_s": round(computed - added, 2),
            "evaluator_mAP50-95": round(again["mAP"], 4)}  # fmt: skip


def heap_model(name: str) -> Any:
    """The training module of ``name`` (its objects stay in the process: the heap a fit's
    garbage collector walks), or None for ``none``."""
    if name == "none":
        return None
    from lucid_train.tasks.task_modules import module_class

    return module_class("detect")(model=name, num_classes=80)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--images", default="500,5000", help="comma list of set sizes")
    parser.add_argument("--classes", type=int, default=80)
    parser.add_argument("--objects", type=int, default=7, help="ground-truth boxes an image")
    parser.add_argument("--detections", type=int, default=300, help="result rows an image")
    parser.add_argument("--heap-model", default="none", help="a model built first, or none")
    args = parser.parse_args(argv)
    held = heap_model(args.heap_model)
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
    del held


if __name__ == "__main__":
    main()
