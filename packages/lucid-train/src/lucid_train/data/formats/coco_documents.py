"""COCO documents made from what a reader kept: the ground truth evaluation scores against
(`scored_ground_truth`, the file's own entries for what was kept) and a document or file written
from any index (`coco_document`, `write_coco`: a YOLO or DOTA split scored or exported as COCO).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from lucid_train.data.formats.coco import clip_box
from lucid_train.data.formats.coco_segmentation import is_ring_length
from lucid_train.data.formats.input_checks import read_json
from lucid_train.data.mask_rings import rle_has_area
from lucid_train.data.records import DatasetIndex, DatasetSchema, ImageRecord
from lucid_train.data.rotated import rbox_corners

__all__ = ["coco_document", "scored_ground_truth", "write_coco"]


def scored_ground_truth(index: DatasetIndex) -> dict[str, Any]:
    """The COCO document evaluation scores ``index`` against, read from its file
    (``index.coco_json``): only the images the reader kept, and of their annotations those it
    kept, box clipped as it clipped it (``bbox`` rewritten, the rest of the entry as in the
    file), then their crowd regions as they are. A perfect prediction of the records' targets
    then scores 1.0, whatever the file held that the loader skipped or clipped. A segment
    object without a usable ``segmentation`` (none, empty, every ring under 3 points, an RLE
    that is empty or not of its image) is scored against the ring it trained, its box
    (assumptions D4): the mask scorer needs one, and an empty one could never be matched."""
    if index.coco_json is None:
        raise ValueError("scored_ground_truth: the index was not read from a COCO file")
    doc: dict[str, Any] = read_json(index.coco_json)
    source = doc["annotations"]
    by_id = {int(im["id"]): im for im in doc["images"]}
    free_id = 1 + max((int(a["id"]) for a in source if "id" in a), default=0)
    images: list[dict[str, Any]] = []
    anns: list[dict[str, Any]] = []
    segment = index.schema.task == "segment"
    for rec in index.records:
        images.append({**by_id[rec.image_id], "id": rec.image_id})
        polygons = rec.targets.polygons
        for i, pos in enumerate(rec.scored):
            ann = {**source[pos], "image_id": rec.image_id}
            without = segment and not _has_mask(ann.get("segmentation"), rec.height, rec.width)
            if without and polygons is not None and i < len(polygons):
                ann["segmentation"] = [[float(v) for v in polygons[i].reshape(-1)]]
            ann["id"] = int(ann["id"]) if "id" in ann else free_id + pos
            ann["category_id"] = int(ann["category_id"])
            if not ann.get("iscrowd", 0):
                box = clip_box(ann["bbox"], rec.width, rec.height)
                assert box is not None  # the reader kept it
                x1, y1, x2, y2 = (float(v) for v in box)
                ann["bbox"] = [x1, y1, x2 - x1, y2 - y1]
            ann.setdefault("area", float(ann["bbox"][2] * ann["bbox"][3]))
            anns.append(ann)
    return {**doc, "images": images, "annotations": anns}


def _has_mask(seg: Any, height: int, width: int) -> bool:
    """Whether a ``segmentation`` entry is a mask the reader trained as it is: an RLE of its
    image with a pixel set, or polygon rings of which one has at least 3 points."""
    if isinstance(seg, dict):
        return rle_has_area(seg, height, width)
    return isinstance(seg, list) and any(
        isinstance(r, list) and is_ring_length(len(r)) for r in seg
    )


def coco_document(index: DatasetIndex, *, images_dir: Path | None = None) -> dict[str, Any]:
    """A COCO JSON document (a dict) holding ``index``'s records, e.g. as evaluation ground truth.

    ``file_name`` is relative to ``images_dir`` when given, else the bare file name. Areas are the
    polygon area (segment, obb) or the box area; ``segmentation`` holds the ring (segment), the
    rotated box corners (obb) or the box as a 4-point ring (detect, pose; pycocotools needs one).
    """
    schema = index.schema
    cats: list[dict[str, Any]] = []
    for name, cid in zip(schema.class_names, schema.category_ids, strict=True):
        cat: dict[str, Any] = {"id": cid, "name": name, "supercategory": "object"}
        if schema.task == "pose":
            cat["keypoints"] = list(schema.keypoint_names)
            cat["skeleton"] = [[a + 1, b + 1] for a, b in schema.skeleton]
        cats.append(cat)
    images: list[dict[str, Any]] = []
    anns: list[dict[str, Any]] = []
    for rec in index.records:
        name = str(rec.path.relative_to(images_dir)) if images_dir else rec.path.name
        images.append(
            {"id": rec.image_id, "file_name": name, "width": rec.width, "height": rec.height}
        )
        anns.extend(_annotations(rec, schema, len(anns) + 1))
    return {"images": images, "annotations": anns, "categories": cats}


def _annotations(rec: ImageRecord, schema: DatasetSchema, first_id: int) -> list[dict[str, Any]]:
    t = rec.targets
    out = []
    for i in range(len(t)):
        x1, y1, x2, y2 = (float(v) for v in t.boxes[i])
        ring: np.ndarray
        if t.polygons is not None:
            ring = t.polygons[i].astype(np.float64)
        elif t.rboxes is not None:
            ring = rbox_corners(t.rboxes[i : i + 1])[0]
        else:
            ring = np.array([[x1, y1], [x2, y1], [x2, y2], [x1, y2]], np.float64)
        area = (
            abs(
                float(
                    np.dot(ring[:, 0], np.roll(ring[:, 1], -1))
                    - np.dot(np.roll(ring[:, 0], -1), ring[:, 1])
                )
            )
            / 2
        )
        ann: dict[str, Any] = {
            "id": first_id + i,
            "image_id": rec.image_id,
            "category_id": schema.category_ids[int(t.labels[i])],
            "bbox": [x1, y1, x2 - x1, y2 - y1],
            "area": area
            if t.polygons is not None or t.rboxes is not None
            else (x2 - x1) * (y2 - y1),
            "iscrowd": 0,
            "segmentation": [[float(v) for v in ring.reshape(-1)]],
        }
        if t.difficult[i]:
            ann["difficult"] = 1
        if t.keypoints is not None and t.keypoint_vis is not None:
            kp = np.concatenate([t.keypoints[i], t.keypoint_vis[i, :, None].astype(np.float32)], -1)
            ann["keypoints"] = [float(v) for v in kp.reshape(-1)]
            ann["num_keypoints"] = int((t.keypoint_vis[i] > 0).sum())
        out.append(ann)
    return out


def write_coco(index: DatasetIndex, ann_file: Path, *, images_dir: Path | None = None) -> None:
    """Write ``index`` as a COCO JSON file (see `coco_document`)."""
    ann_file.parent.mkdir(parents=True, exist_ok=True)
    ann_file.write_text(json.dumps(coco_document(index, images_dir=images_dir)))
