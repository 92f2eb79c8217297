"""COCO JSON: read a split into `Targets` (the documents written back: `coco_documents`).

What is read, per task:

* every task: ``bbox`` ``[x, y, w, h]`` → xyxy clipped to the image; contiguous labels follow
  the categories sorted by id, and `DatasetSchema.category_ids` maps them back.
* ``segment``: the polygon rings of ``segmentation`` (each at least 3 points), or the outer
  boundary of each part of its run-length mask (`lucid_train.data.mask_rings`), an object's
  parts joined into one ring (`lucid_train.data.polygons.merge_rings`).
* ``obb``: the first ring must have exactly 4 points; it becomes a minimum-area rotated box, and
  ``boxes`` is that box's envelope.
* ``pose``: ``keypoints`` ``[x1, y1, v1, ...]`` of length ``3 K``; flip pairs come from keypoint
  names (``left_*`` ↔ ``right_*``).

Crowd regions (``iscrowd: 1``) are not trained on: they are counted in the load report and left
to evaluation, which scores them as COCO does (assumptions.md D4). Evaluation's ground truth is
what the reader kept (`coco_documents.scored_ground_truth`): the images it kept, each
annotation it kept with its box clipped as it clipped it, and the crowd regions of those
images; the rest of each entry (area, segmentation, keypoints) is the file's own.
An extra per-annotation key ``difficult`` (written by DOTA tiling) sets `Targets.difficult`.

Hard errors (the file is wrong): duplicate image or annotation ids, an annotation whose
``category_id`` is not in ``categories`` or whose ``image_id`` is not in ``images``, a keypoint
list of the wrong length, and any field of the wrong type (an id that is not an integer, a
``bbox`` that is not four finite numbers, a size that is not a positive integer, an id past the
64-bit integer range, an ``area`` that is not a number from 0 to 1e10, ...), and a
``file_name`` written the Windows way (backslashes) that names no file: each names the file,
the entry (``annotations[3]``) and the fix.
Counted skips: crowd regions, empty boxes (after clipping to the image), rings with fewer than 3
points or an odd count of coordinates (or not 4 points for obb), RLE masks that do not decode as
their image's (segment; obb reads polygons only), missing / unreadable image files. Counted, not
skipped: a segment object without a usable outline keeps its box as its ring.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lucid_train.data.formats.coco_segmentation import annotation_ring
from lucid_train.data.formats.input_checks import number_list, read_json
from lucid_train.data.image_io import Verify, check_image, exif_turned, too_small
from lucid_train.data.records import (
    CLIP_NOTED_PX,
    CLIPPED,
    DataFormatError,
    DatasetIndex,
    DatasetSchema,
    ImageRecord,
    LoadReport,
    Task,
)
from lucid_train.data.rotated import fit_rboxes, rbox_envelopes
from lucid_train.data.targets import Targets

_UNIT_BOX_MIN_SIDE = 8  # images this small may hold only sub-pixel objects: not judged
_INT64_BOUND = 2**63
# COCOeval's area ranges end at 1e5 ** 2: a ground truth whose ``area`` is outside [0, 1e10]
# (negative, NaN, infinite) is ignored by every range, so such a file scored -1 without a word.
_AREA_MAX = 1e10


def _entries(doc: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    """``doc[key]`` as a list of JSON objects, or a refusal naming the first that is not one."""
    items = doc[key]
    if not isinstance(items, list):
        raise DataFormatError(
            f"{where}: '{key}' must be a list of objects, got {type(items).__name__}"
        )
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise DataFormatError(
                f"{where}: {key}[{i}] must be an object, got {type(item).__name__} {item!r:.40}"
            )
    return items


def _int(entry: dict[str, Any], key: str, where: str, *, positive: bool = False) -> int:
    """An integer field (an integral float such as ``3.0`` is accepted; bools are not), within
    int64: ids travel as int64 tensors and arrays (batches, evaluation), and JSON's integers
    have no bound, so a larger one is refused here rather than crashing a run later."""
    if key not in entry:
        raise DataFormatError(f"{where}: missing '{key}'; add it")
    v = entry[key]
    ok = isinstance(v, int) and not isinstance(v, bool)
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        v, ok = int(v), True
    if ok and not -_INT64_BOUND <= v < _INT64_BOUND:
        raise DataFormatError(
            f"{where}: '{key}' {v} is past the 64-bit integer range (±2^63) ids are kept in; "
            "number the entries with smaller integers"
        )
    if not ok or (positive and v <= 0):
        kind = "a positive integer" if positive else "an integer"
        raise DataFormatError(f"{where}: '{key}' must be {kind}, got {v!r:.40}")
    return int(v)


def flip_index_from_names(names: Sequence[str]) -> tuple[int, ...]:
    """For each keypoint name, the index of its mirror image (``left`` ↔ ``right``, else itself)."""
    lookup = {n.lower(): i for i, n in enumerate(names)}
    out = []
    for i, name in enumerate(names):
        low = name.lower()
        mirror = low.replace("left", "\0").replace("right", "left").replace("\0", "right")
        out.append(lookup.get(mirror, i) if mirror != low else i)
    return tuple(out)


UNNAMED = "category without a name (named by its id)"


def _unnamed(category: dict[str, Any]) -> bool:
    name = category.get("name")
    return name is None or not str(name).strip()


def _category_name(category: dict[str, Any]) -> str:
    """The category's ``name``; its id where the name is missing, null or blank (a null read
    as the class ``None`` before 2026-12-08). `read_coco` counts those as `UNNAMED`."""
    return str(category["id"] if _unnamed(category) else category["name"])


def _schema(doc: dict[str, Any], task: Task, where: str) -> DatasetSchema:
    entries = _entries(doc, "categories", where)
    keyed = [(_int(c, "id", f"{where}: categories[{i}]"), c) for i, c in enumerate(entries)]
    cats = [c for _, c in sorted(keyed, key=lambda kc: kc[0])]
    if not cats:
        raise DataFormatError(
            f"{where}: 'categories' is empty; list every category with an id and a name"
        )
    ids = sorted(cid for cid, _ in keyed)
    if len(set(ids)) != len(ids):
        raise DataFormatError(
            f"{where}: duplicate category ids in 'categories': {ids}; "
            "give every category a unique id"
        )
    names = tuple(_category_name(c) for c in cats)
    if task != "pose":
        return DatasetSchema(task, names, tuple(ids))
    with_kpts = [c for c in cats if c.get("keypoints")]
    if not with_kpts:
        raise DataFormatError(
            f"{where}: task 'pose' needs a category with a 'keypoints' list of names; none has one"
        )
    lists = [c["keypoints"] for c in with_kpts]
    if not all(isinstance(ks, list) and all(isinstance(n, str) for n in ks) for ks in lists):
        raise DataFormatError(
            f"{where}: a category's 'keypoints' must be a list of keypoint names (strings)"
        )
    kpt_names = tuple(lists[0])
    if any(tuple(ks) != kpt_names for ks in lists[1:]):
        raise DataFormatError(
            f"{where}: categories name different keypoint lists; lucid needs one schema"
        )
    if len({n.lower() for n in kpt_names}) != len(kpt_names):
        raise DataFormatError(
            f"{where}: keypoint names repeat (ignoring case) in {list(kpt_names)}; "
            "give every keypoint its own name"
        )
    return DatasetSchema(
        task,
        names,
        tuple(ids),
        kpt_names,
        flip_index_from_names(kpt_names),
        _skeleton(with_kpts[0].get("skeleton", []), len(kpt_names), where),
    )


def _skeleton(value: Any, k: int, where: str) -> tuple[tuple[int, int], ...]:
    """COCO's 1-based keypoint pairs as 0-based ones, each index checked against ``K``."""
    pairs = value if isinstance(value, list) else [value]
    out = []
    for pair in pairs:
        ok = isinstance(pair, list) and len(pair) == 2
        ok = ok and all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
        if not ok or not all(1 <= v <= k for v in pair):
            raise DataFormatError(
                f"{where}: 'skeleton' must list pairs of keypoint numbers 1..{k}, got {pair!r:.40}"
            )
        out.append((pair[0] - 1, pair[1] - 1))
    return tuple(out)


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
    doc = read_json(ann_file)
    if not isinstance(doc, dict):
        raise DataFormatError(
            f"{ann_file}: a COCO file holds one JSON object, got {type(doc).__name__}"
        )
    for key in ("images", "annotations", "categories"):
        if key not in doc:
            raise DataFormatError(
                f"{ann_file}: missing top-level key '{key}'; is this a COCO file?"
            )
    schema = _schema(doc, task, str(ann_file))
    label_of = {cid: i for i, cid in enumerate(schema.category_ids)}
    report = LoadReport(str(ann_file))
    for c in doc["categories"]:  # each an object with an id: `_schema` checked
        if _unnamed(c):
            report.skip(UNNAMED, f"category id {c['id']}")

    images: dict[int, dict[str, Any]] = {}
    by_file: dict[str, int] = {}
    for i, im in enumerate(_entries(doc, "images", str(ann_file))):
        iid = _int(im, "id", f"{ann_file}: images[{i}]")
        if iid in images:
            raise DataFormatError(
                f"{ann_file}: duplicate image id {iid} ({images[iid].get('file_name')} and "
                f"{im.get('file_name')}); give every image a unique id"
            )
        name = im.get("file_name")
        if isinstance(name, str) and by_file.setdefault(name, iid) != iid:
            # One file under two ids would train twice and be scored twice, each id with only
            # its own annotations: the other id's objects would count as missed.
            raise DataFormatError(
                f"{ann_file}: images {by_file[name]} and {iid} both name {name!r}; list each "
                "file once, with all its annotations under that one id"
            )
        images[iid] = im

    per_image: dict[int, list[tuple[int, dict[str, Any]]]] = {iid: [] for iid in images}
    seen_ids: set[Any] = set()
    for i, ann in enumerate(_entries(doc, "annotations", str(ann_file))):
        at = f"{ann_file}: annotations[{i}]"
        aid = _int(ann, "id", at) if "id" in ann else "?"
        if "id" in ann:
            # pycocotools indexes annotations by id: a repeat silently replaces ground truth.
            if aid in seen_ids:
                raise DataFormatError(
                    f"{ann_file}: duplicate annotation id {aid} (image_id {ann.get('image_id')}); "
                    "give every annotation a unique id"
                )
            seen_ids.add(aid)
        if _int(ann, "category_id", at) not in label_of:
            raise DataFormatError(
                f"{ann_file}: annotation {aid} has category_id {ann['category_id']}, "
                f"which is not in "
                f"'categories' (ids {list(schema.category_ids)}); add the category or fix the id"
            )
        iid = _int(ann, "image_id", at)
        if iid not in per_image:
            raise DataFormatError(
                f"{ann_file}: annotation {aid} refers to image_id {iid}, which is not in 'images'; "
                "add the image or fix the id"
            )
        per_image[iid].append((i, ann))

    records: list[ImageRecord] = []
    for iid in sorted(images):
        im = images[iid]
        at = f"{ann_file}: image {iid}"
        name = im.get("file_name")
        if not isinstance(name, str) or not name.strip() or "\0" in name:
            raise DataFormatError(
                f"{at}: 'file_name' must be the image's path relative to {images_dir}, "
                f"got {name!r:.40}"
            )
        width, height = _int(im, "width", at, positive=True), _int(im, "height", at, positive=True)
        path = images_dir / name
        if not path.is_file() and "\\" in name:
            # A Windows export: every image would be skipped as missing (as YOLO image lists).
            raise DataFormatError(
                f"{at}: 'file_name' {name!r:.80} names no file and is written the Windows way "
                f"(backslashes); write it relative to {images_dir} with forward slashes (sub/a.jpg)"
            )
        if not path.is_file():
            report.skip("missing image file", str(path))
            continue
        size = check_image(path, verify)
        if isinstance(size, str):
            report.skip(size, str(path))
            continue
        if (small := too_small(width, height)) is not None:
            report.skip(small, str(path))
            continue
        if verify != "none" and size != (width, height):
            turned = (
                " upright (its EXIF orientation turns it; if the labels were drawn on the "
                "stored pixels, remove that tag from the file)"
                if exif_turned(path)
                else ""
            )
            raise DataFormatError(
                f"{ann_file}: image {iid} ({path}) is declared {width}x{height} but the file is "
                f"{size[0]}x{size[1]}{turned}; fix 'width'/'height' in the JSON"
            )
        targets, scored = _image_targets(
            per_image[iid], schema, label_of, width, height, report, str(ann_file)
        )
        records.append(ImageRecord(iid, path, height, width, targets, scored))
    _refuse_unit_boxes(records, ann_file)
    report.log()
    return DatasetIndex(schema, records, report, coco_json=ann_file)


def _refuse_unit_boxes(records: list[ImageRecord], ann_file: Path) -> None:
    """Refuse a file whose every box lies in the unit square on images of more than a few
    pixels: its 'bbox' values were written normalised (YOLO's convention), not in COCO's
    pixels, and each object would train as a sub-pixel box that no prediction can match."""
    boxes = [r.targets.boxes for r in records if len(r.targets.boxes)]
    if not boxes or max(float(b.max()) for b in boxes) > 1.0:
        return
    side = min(min(r.width, r.height) for r in records)
    if side <= _UNIT_BOX_MIN_SIDE:
        return
    count = sum(len(b) for b in boxes)
    raise DataFormatError(
        f"{ann_file}: all {count} boxes lie within [0, 1] px on images of at least {side} px a "
        "side, so its 'bbox' values look normalised to the image size; COCO's are pixels "
        "[x, y, width, height]: multiply x and width by the image's 'width', y and height by its "
        "'height' (and 'segmentation' points likewise), or export the annotations as COCO again"
    )


def clip_box(xywh: Sequence[float] | np.ndarray, width: int, height: int) -> np.ndarray | None:
    """COCO ``[x, y, w, h]`` as xyxy float64 clipped to the image, or None when nothing is left."""
    # Plain floats: a reader calls this once an annotation, where numpy's per-call cost was a
    # fifth of reading a large split. A sum past float64 is inf, clipped to the side as before.
    x, y, w, h = (float(v) for v in xywh)
    x1, x2 = min(max(x, 0.0), width), min(max(x + w, 0.0), width)
    y1, y2 = min(max(y, 0.0), height), min(max(y + h, 0.0), height)
    return None if x2 <= x1 or y2 <= y1 else np.array([x1, y1, x2, y2], np.float64)


def _check_area(ann: dict[str, Any], aid: str) -> None:
    """Refuse an ``area`` evaluation cannot use (see `_AREA_MAX`; a string or null stopped
    pycocotools' scorer with a TypeError); a missing one is computed from the box."""
    if "area" not in ann:
        return
    area = ann["area"]
    if isinstance(area, bool) or not isinstance(area, (int, float)) or not 0 <= area <= _AREA_MAX:
        raise DataFormatError(
            f"{aid}: 'area' must be the object's area in pixels, a number from 0 to 1e10, got "
            f"{area!r:.40}; fix it, or remove the key to have it computed from 'bbox'"
        )


def _image_targets(
    anns: list[tuple[int, dict[str, Any]]],
    schema: DatasetSchema,
    label_of: dict[int, int],
    width: int,
    height: int,
    report: LoadReport,
    where: str,
) -> tuple[Targets, tuple[int, ...]]:
    """The image's targets and the annotations evaluation scores (`ImageRecord.scored`)."""
    task = schema.task
    k = schema.num_keypoints
    boxes, labels, difficult, rings, kpts = [], [], [], [], []
    kept: list[int] = []
    crowd: list[int] = []
    for pos, ann in anns:
        aid = f"{where}: annotation {ann.get('id', '?')}"
        for flag in ("iscrowd", "difficult"):
            if not isinstance(ann.get(flag, 0), (bool, int, float)):
                raise DataFormatError(f"{aid}: '{flag}' must be 0 or 1, got {ann[flag]!r:.40}")
        _check_area(ann, aid)
        if ann.get("iscrowd", 0):
            report.skip("crowd region (scored by evaluation, not trained on)", aid)
            crowd.append(pos)
            continue
        if "bbox" not in ann:
            raise DataFormatError(f"{aid}: missing 'bbox' [x, y, width, height]; add it")
        xywh = number_list(ann["bbox"], aid, "'bbox'")
        if xywh.size != 4:
            raise DataFormatError(
                f"{aid}: 'bbox' must be [x, y, width, height], got {xywh.size} values"
            )
        box = clip_box(xywh, width, height)
        if box is None:
            report.skip("empty box (no area inside the image)", aid)
            continue
        x, y, w, h = xywh.tolist()
        if max(-x, -y, x + w - width, y + h - height) > CLIP_NOTED_PX:
            report.skip(CLIPPED, aid)
        if task in ("segment", "obb"):
            ring = annotation_ring(ann.get("segmentation"), task, box, (width, height), aid, report)
            if ring is None:
                continue
            rings.append(ring)
        if task == "pose":
            flat = ann.get("keypoints")
            values = np.zeros(0) if flat is None else number_list(flat, aid, "'keypoints'")
            if values.size != 3 * k:
                raise DataFormatError(
                    f"{aid}: expected {3 * k} keypoint values ({k} keypoints x (x, y, v)) as the "
                    f"category declares, got {values.size}"
                )
            kpts.append(values.reshape(k, 3))
        boxes.append(box)
        labels.append(label_of[int(ann["category_id"])])
        difficult.append(bool(ann.get("difficult", False)))
        kept.append(pos)
    scored = (*kept, *crowd)
    n = len(boxes)
    base = Targets(
        boxes=np.asarray(boxes, np.float32).reshape(n, 4),
        labels=np.asarray(labels, np.int64).reshape(n),
        difficult=np.asarray(difficult, np.bool_).reshape(n),
    )
    if task == "segment":
        return base.replace(polygons=tuple(r.astype(np.float32) for r in rings)), scored
    if task == "obb":
        with np.errstate(over="ignore", invalid="ignore"):
            rb = fit_rboxes(np.stack(rings) if rings else np.zeros((0, 4, 2)))
        if not np.isfinite(rb).all():
            raise DataFormatError(
                f"{where}: a 4-point ring of image {anns[0][1].get('image_id')} spans more than "
                "float32 can hold; fix its coordinates (pixels of the image)"
            )
        return base.replace(boxes=rbox_envelopes(rb), rboxes=rb), scored
    if task == "pose":
        arr = np.stack(kpts) if kpts else np.zeros((0, k, 3))
        vis = arr[..., 2].round().clip(0, 2).astype(np.uint8)
        xy = np.where(vis[..., None] > 0, arr[..., :2], 0.0).astype(np.float32)
        return base.replace(keypoints=xy, keypoint_vis=vis), scored
    return base, scored
