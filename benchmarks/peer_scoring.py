"""The peer's predictions scored by our scorers against the set's own ground truth."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SIZES = ("small", "medium", "large")
# The keys say pycocotools: these once-a-run scores use it itself, not the in-fit default (the
# compiled scorer, equal to it within 2.2e-16; lucid_train.evaluation.coco_eval).
SCORER = "pycocotools"


def size_keys(stats: dict[str, float], prefix: str) -> dict[str, float]:
    """pycocotools' AP50-95 of the size buckets (area < 32², < 96², above) under our key names;
    None where the set has no ground truth of that size (pycocotools says -1)."""
    return {
        f"{prefix}pycocotools_AP_{size}": None if stats[f"mAP_{size}"] < 0 else stats[f"mAP_{size}"]
        for size in SIZES
    }


def score_results(pred_json: Path, gt: dict[str, Any], task: str) -> dict[str, Any]:
    """A COCO results list in the set's own ids (``lucid validate --save_json``'s
    ``predictions_<path>.json``) scored by pycocotools with the size buckets: boxes, and masks
    for segment."""
    from lucid_train.evaluation import coco_from_dict, run_cocoeval

    dets = json.loads(pred_json.read_text())
    coco = coco_from_dict(gt, SCORER)
    boxes = [{k: v for k, v in d.items() if k != "segmentation"} for d in dets]
    stats = run_cocoeval(coco, boxes, "bbox", scorer=SCORER)
    out = {"pycocotools_mAP50-95": stats["mAP"], "pycocotools_mAP50": stats["mAP50"]}
    out.update(size_keys(stats, ""))
    if task == "segment":
        segm = run_cocoeval(coco, [d for d in dets if "segmentation" in d], "segm", scorer=SCORER)
        out.update(
            {"mask_pycocotools_mAP50-95": segm["mAP"], "mask_pycocotools_mAP50": segm["mAP50"]}
        )
        out.update(size_keys(segm, "mask_"))
    return out


def rescore(
    pred_json: Path, gt: dict[str, Any], data: dict[str, Any], task: str = "detect"
) -> dict[str, Any]:
    """Score Ultralytics' ``predictions.json`` with our pycocotools scorer against our COCO
    ground truth (boxes; segment also its RLE masks, pose its keypoints with our OKS sigmas,
    assumptions D12). Its image ids come from file stems and its category ids are 1 + class
    index, so both are mapped through the file name and ``category_ids``."""
    from lucid_train.evaluation import coco_from_dict, keypoint_sigmas, run_cocoeval

    category_ids = data["category_ids"]
    by_name = {img["file_name"]: int(img["id"]) for img in gt["images"]}
    dets, masks, kpts = [], [], []
    for d in json.loads(pred_json.read_text()):
        det = {
            "image_id": by_name[d["file_name"]],
            "category_id": int(category_ids[int(d["category_id"]) - 1]),
            "bbox": [float(v) for v in d["bbox"]],
            "score": float(d["score"]),
        }
        dets.append(det)
        if task == "segment" and "segmentation" in d:
            masks.append({**det, "segmentation": d["segmentation"]})
        if task == "pose" and "keypoints" in d:
            kpts.append({**det, "keypoints": [float(v) for v in d["keypoints"]]})
    coco = coco_from_dict(gt, SCORER)
    stats = run_cocoeval(coco, dets, "bbox", scorer=SCORER)
    images = {d["image_id"] for d in dets}
    result = {
        "pycocotools_mAP50-95": stats["mAP"],
        "pycocotools_mAP50": stats["mAP50"],
        **size_keys(stats, ""),
        "detections": len(dets),
        "images_with_detections": len(images),
    }
    if task == "segment":
        segm = run_cocoeval(coco, masks, "segm", scorer=SCORER)
        result["mask_pycocotools_mAP50-95"] = segm["mAP"]
        result["mask_pycocotools_mAP50"] = segm["mAP50"]
        result.update(size_keys(segm, "mask_"))
    if task == "pose":
        sigmas = keypoint_sigmas(int(data["num_keypoints"]))
        oks = run_cocoeval(coco, kpts, "keypoints", sigmas, scorer=SCORER)
        result["pose_pycocotools_mAP50-95"] = oks["mAP"]
        result["pose_pycocotools_mAP50"] = oks["mAP50"]
    return result


def rescore_rotated(pred_json: Path, data: dict[str, Any]) -> dict[str, Any]:
    """Score Ultralytics' OBB ``predictions.json`` (``rbox`` in source pixels, radians) with our
    DOTA-protocol evaluator against the set's rotated ground truth in the same pixels (rotated IoU
    does not depend on the angle convention). The keys say ``pycocotools`` for the table's sake;
    the scorer is ``RotatedEvaluator``, as in our validation."""
    from lucid_train.data import read_coco
    from lucid_train.evaluation import RotatedEvaluator

    root = Path(data["coco_root"])
    index = read_coco(root / "annotations" / "val.json", root / "images" / "val", task="obb")
    label_of = {int(c): i for i, c in enumerate(data["category_ids"])}
    by_name: dict[str, list[dict[str, Any]]] = {}
    for d in json.loads(pred_json.read_text()):
        by_name.setdefault(d["file_name"], []).append(d)
    ev = RotatedEvaluator(len(data["category_ids"]))
    for rec in index.records:
        dets = by_name.get(rec.path.name, [])
        t = rec.targets
        ev.add(
            [d["rbox"] for d in dets],
            [float(d["score"]) for d in dets],
            [label_of[int(data["category_ids"][int(d["category_id"]) - 1])] for d in dets],
            t.rboxes if t.rboxes is not None else [],
            t.labels,
            t.difficult,
        )
    stats = ev.compute()
    return {
        "pycocotools_mAP50-95": stats["mAP50_95"],
        "pycocotools_mAP50": stats["mAP50"],
        "detections": sum(len(v) for v in by_name.values()),
    }
