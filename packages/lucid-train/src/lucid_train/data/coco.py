"""COCO JSON: read a split into `Targets`, and write records back as COCO JSON.

What is read, per task:

* every task: ``bbox`` ``[x, y, w, h]`` → xyxy clipped to the image; contiguous labels follow
  the categories sorted by id, and `DatasetSchema.category_ids` maps them back.
* ``segment``: the *first* polygon ring of ``segmentation`` (at least 3 points).
* ``obb``: the first ring must have exactly 4 points; it becomes a minimum-area rotated box, and
  ``boxes`` is that box's envelope.
* ``pose``: ``keypoints`` ``[x1, y1, v1, ...]`` of length ``3 K``; flip pairs come from keypoint
  names (``left_*`` ↔ ``right_*``).

Crowd regions (``iscrowd: 1``) are not trained on: they are counted in the load report and left
to evaluation, which reads the original JSON and scores them as COCO does (assumptions.md D4).
An extra per-annotation key ``difficult`` (written by DOTA tiling) sets `Targets.difficult`.

Hard errors (the file is wrong): duplicate image or annotation ids, an annotation whose
``category_id`` is not in ``categories`` or whose ``image_id`` is not in ``images``, a keypoint
list of the wrong length.
Counted skips: crowd regions, empty boxes, rings with fewer than 3 points (or not 4 for obb), RLE
masks, missing / unreadable image files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lucid_train.data.image_io import Verify, check_image
from lucid_train.data.records import (
    DataFormatError,
    DatasetIndex,
    DatasetSchema,
    ImageRecord,
    LoadReport,
    Task,
)
from lucid_train.data.rotated import fit_rboxes, rbox_corners, rbox_envelopes
from lucid_train.data.targets import Targets


def flip_index_from_names(names: Sequence[str]) -> tuple[int, ...]:
    """For each keypoint name, the index of its mirror image (``left`` ↔ ``right``, else itself)."""
    lookup = {n.lower(): i for i, n in enumerate(names)}
    out = []
    for i, name in enumerate(names):
        low = name.lower()
        mirror = low.replace("left", "\0").replace("right", "left").replace("\0", "right")
        out.append(lookup.get(mirror, i) if mirror != low else i)
    return tuple(out)


def _schema(doc: dict[str, Any], task: Task, where: str) -> DatasetSchema:
    cats = sorted(doc.get("categories", []), key=lambda c: int(c["id"]))
    if not cats:
        raise DataFormatError(
            f"{where}: 'categories' is empty; list every category with an id and a name"
        )
    ids = [int(c["id"]) for c in cats]
    if len(set(ids)) != len(ids):
        raise DataFormatError(f"{where}: duplicate category ids in 'categories': {ids}")
    names = tuple(str(c.get("name", c["id"])) for c in cats)
    if task != "pose":
        return DatasetSchema(task, names, tuple(ids))
    with_kpts = [c for c in cats if c.get("keypoints")]
    if not with_kpts:
        raise DataFormatError(
            f"{where}: task 'pose' needs a category with a 'keypoints' list of names; none has one"
        )
    kpt_names = tuple(str(n) for n in with_kpts[0]["keypoints"])
    for c in with_kpts[1:]:
        if tuple(c["keypoints"]) != kpt_names:
            raise DataFormatError(
                f"{where}: categories name different keypoint lists; lucid needs one schema"
            )
    skeleton = tuple((int(a) - 1, int(b) - 1) for a, b in with_kpts[0].get("skeleton", []))
    return DatasetSchema(
        task, names, tuple(ids), kpt_names, flip_index_from_names(kpt_names), skeleton
    )


def read_coco(
    ann_file: Path | str,
    images_dir: Path | str,
    *,
    task: Task,
    verify: Verify = "header",
) -> DatasetIndex:
    """Read one COCO split.

    Args:
        ann_file: the annotation JSON.
        images_dir: folder the images' ``file_name`` entries are relative to.
        task: which geometry to read (see the module docstring).
        verify: image check at load time (`lucid_train.data.image_io.check_image`); with
            ``full``, corrupt or truncated images are skipped and counted.

    Returns:
        A `DatasetIndex` with records sorted by image id and the load report (already logged).
    """
    ann_file, images_dir = Path(ann_file), Path(images_dir)
    try:
        doc = json.loads(ann_file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataFormatError(f"{ann_file}: cannot read COCO JSON ({exc})") from exc
    for key in ("images", "annotations", "categories"):
        if key not in doc:
            raise DataFormatError(
                f"{ann_file}: missing top-level key '{key}'; is this a COCO file?"
            )
    schema = _schema(doc, task, str(ann_file))
    label_of = {cid: i for i, cid in enumerate(schema.category_ids)}
    report = LoadReport(str(ann_file))

    images: dict[int, dict[str, Any]] = {}
    for im in doc["images"]:
        iid = int(im["id"])
        if iid in images:
            raise DataFormatError(
                f"{ann_file}: duplicate image id {iid} ({images[iid].get('file_name')} and "
                f"{im.get('file_name')}); give every image a unique id"
            )
        images[iid] = im

    per_image: dict[int, list[dict[str, Any]]] = {iid: [] for iid in images}
    seen_ids: set[Any] = set()
    for ann in doc["annotations"]:
        aid = ann.get("id", "?")
        if "id" in ann:
            # pycocotools indexes annotations by id: a repeat silently replaces ground truth.
            if aid in seen_ids:
                raise DataFormatError(
                    f"{ann_file}: duplicate annotation id {aid} (image_id {ann.get('image_id')}); "
                    "give every annotation a unique id"
                )
            seen_ids.add(aid)
        if int(ann["category_id"]) not in label_of:
            raise DataFormatError(
                f"{ann_file}: annotation {aid} has category_id {ann['category_id']}, "
                f"which is not in "
                f"'categories' (ids {list(schema.category_ids)}); add the category or fix the id"
            )
        iid = int(ann["image_id"])
        if iid not in per_image:
            raise DataFormatError(
                f"{ann_file}: annotation {aid} refers to image_id {iid}, which is not in 'images'"
            )
        per_image[iid].append(ann)

    records: list[ImageRecord] = []
    for iid in sorted(images):
        im = images[iid]
        path = images_dir / str(im["file_name"])
        if not path.is_file():
            report.skip("missing image file", str(path))
            continue
        size = check_image(path, verify)
        if size is None:
            report.skip("corrupt or truncated image", str(path))
            continue
        width, height = int(im["width"]), int(im["height"])
        if verify != "none" and size != (width, height):
            raise DataFormatError(
                f"{ann_file}: image {iid} ({path}) is declared {width}x{height} but the file is "
                f"{size[0]}x{size[1]}; fix 'width'/'height' in the JSON"
            )
        targets = _image_targets(
            per_image[iid], schema, label_of, width, height, report, str(ann_file)
        )
        records.append(ImageRecord(iid, path, height, width, targets))
    report.log()
    return DatasetIndex(schema, records, report, coco_json=ann_file)


def _image_targets(
    anns: list[dict[str, Any]],
    schema: DatasetSchema,
    label_of: dict[int, int],
    width: int,
    height: int,
    report: LoadReport,
    where: str,
) -> Targets:
    task = schema.task
    k = schema.num_keypoints
    boxes, labels, difficult, rings, kpts = [], [], [], [], []
    for ann in anns:
        aid = f"{where} annotation {ann.get('id', '?')}"
        if ann.get("iscrowd", 0):
            report.skip("crowd region (scored by evaluation, not trained on)", aid)
            continue
        x, y, w, h = (float(v) for v in ann["bbox"])
        box = np.array([x, y, x + w, y + h], np.float64)
        box[[0, 2]] = box[[0, 2]].clip(0, width)
        box[[1, 3]] = box[[1, 3]].clip(0, height)
        if box[2] <= box[0] or box[3] <= box[1]:
            report.skip("empty box", aid)
            continue
        if task in ("segment", "obb"):
            seg = ann.get("segmentation")
            if not isinstance(seg, list) or not seg:
                report.skip("no polygon segmentation (RLE or missing)", aid)
                continue
            ring = np.asarray(seg[0], np.float64)
            if ring.size % 2 or ring.size < 6:
                report.skip("polygon with fewer than 3 points", aid)
                continue
            ring = ring.reshape(-1, 2)
            if task == "obb" and ring.shape[0] != 4:
                report.skip("rotated ring without exactly 4 points", aid)
                continue
            rings.append(ring)
        if task == "pose":
            flat = ann.get("keypoints")
            if flat is None or len(flat) != 3 * k:
                raise DataFormatError(
                    f"{aid}: expected {3 * k} keypoint values ({k} keypoints x (x, y, v)) as the "
                    f"category declares, got {0 if flat is None else len(flat)}"
                )
            kpts.append(np.asarray(flat, np.float64).reshape(k, 3))
        boxes.append(box)
        labels.append(label_of[int(ann["category_id"])])
        difficult.append(bool(ann.get("difficult", False)))
    n = len(boxes)
    base = Targets(
        boxes=np.asarray(boxes, np.float32).reshape(n, 4),
        labels=np.asarray(labels, np.int64).reshape(n),
        difficult=np.asarray(difficult, np.bool_).reshape(n),
    )
    if task == "segment":
        return base.replace(polygons=tuple(r.astype(np.float32) for r in rings))
    if task == "obb":
        rb = fit_rboxes(np.stack(rings) if rings else np.zeros((0, 4, 2)))
        return base.replace(boxes=rbox_envelopes(rb), rboxes=rb)
    if task == "pose":
        arr = np.stack(kpts) if kpts else np.zeros((0, k, 3))
        vis = arr[..., 2].round().clip(0, 2).astype(np.uint8)
        xy = np.where(vis[..., None] > 0, arr[..., :2], 0.0).astype(np.float32)
        return base.replace(keypoints=xy, keypoint_vis=vis)
    return base


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
