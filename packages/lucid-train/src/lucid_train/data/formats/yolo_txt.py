"""YOLO txt datasets: ``data.yaml`` + ``images/<split>/`` + ``labels/<split>/*.txt``.

One label file per image (``images`` replaced by ``labels`` in the path, suffix ``.txt``); one
instance per line, every coordinate normalised to ``[0, 1]`` by the image width / height:

* ``detect``:  ``cls cx cy w h``
* ``segment``: ``cls x1 y1 x2 y2 ... xP yP`` (``P >= 3``; the box is the ring's envelope)
* ``pose``:    ``cls cx cy w h`` then ``K`` keypoints of ``D`` values (``kpt_shape: [K, D]``,
  ``D`` 2 for ``x y``, 3 for ``x y v``)
* ``obb``:     ``cls x1 y1 x2 y2 x3 y3 x4 y4`` (four corners; fitted to a rotated box)

A ``detect`` read takes a segment or pose set as the authors' loader does for a box task: a
polygon line is its enclosing box, a line of ``5 + K * D`` values (the set's ``kpt_shape``) its
box without the keypoints; both counted in the load report.

Values up to `SLACK` outside ``[0, 1]`` are clipped and counted, as the authors' loader accepts
them; further out they are refused, naming the file and line. Boxes are clipped to the image.
An empty label file is a background image; a *missing* label file is an error by default
(``missing_labels`` chooses ``skip`` or ``background`` instead, both counted in the load
report); a folder where the label file should be is an error whatever ``missing_labels`` says.
A box without area (zero width or height; an obb quad on one line) is skipped and counted, as
the COCO reader does; so is a label file under ``labels/`` that no image of the split has, and
a line repeating an earlier one of its file (the authors' reader drops such rows). A keypoint
visibility other than 0, 1 or 2 but within [0, 2] reads as labelled, as any non-zero one is in
the authors' loss and metrics, and is counted. An image listed twice (a
folder named twice, a repeated line) is read once, and an image whose label file another
image of the split already took (``a.jpg`` beside ``a.png``) is skipped; both counted. Folders
are walked through symbolic links to folders.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from lucid_train.data.formats.data_yaml import dump_data_yaml, read_data_yaml
from lucid_train.data.formats.input_checks import read_text
from lucid_train.data.formats.yolo_files import (
    count_orphan_labels,
    label_path,
    refuse_label_file,
    split_images,
)
from lucid_train.data.image_io import Verify, usable_size
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
from lucid_train.data.rotated import fit_rboxes, rbox_corners, rbox_envelopes
from lucid_train.data.targets import Targets

MissingLabels = Literal["error", "skip", "background"]


# More keypoints than any skeleton has: a larger kpt_shape is a typo, not a dataset.
MAX_KEYPOINTS = 1000
# A rotated box side at most this (pixels) is no side: four points on one line fit ~1e-14.
EMPTY_SIDE_PX = 1e-6
DUPLICATE_LINE = "label line repeating an earlier one (dropped, as the authors' reader drops it)"
# The authors' loader (8.4.190 `verify_image_label`) accepts label values this far outside
# [0, 1] (an exporter's rounding) and clips the instances to the image; further out is refused.
SLACK = 0.01


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _schema(cfg: dict[str, Any], task: Task, where: Path) -> tuple[DatasetSchema, int]:
    names = cfg.get("names")
    if isinstance(names, list) and names:
        class_names = tuple(str(n) for n in names)
    elif isinstance(names, dict) and names:
        # Integer keys, or quoted digits ('0': cat) as some writers emit.
        if not all(_is_int(k) or (isinstance(k, str) and k.isdecimal()) for k in names):
            raise DataFormatError(
                f"{where}: 'names' keys must be class indices 0..{len(names) - 1}, got "
                f"{list(names)!r:.60}"
            )
        by_index = {int(k): v for k, v in names.items()}
        keys = sorted(by_index)
        if len(by_index) != len(names) or keys != list(range(len(keys))):
            raise DataFormatError(f"{where}: 'names' keys must be 0..{len(names) - 1}, got {keys}")
        class_names = tuple(str(by_index[k]) for k in keys)
    else:
        raise DataFormatError(
            f"{where}: 'names' must be a non-empty list or mapping of class index to name, got "
            f"{names!r:.40}"
        )
    values = list(names.values()) if isinstance(names, dict) else names
    if None in values:  # a blank entry ('- ', '1: ~'): it trained as a class named 'None'
        raise DataFormatError(
            f"{where}: 'names' has an empty entry (class {class_names.index('None')}); write "
            "the class's name there"
        )
    nc = cfg.get("nc")
    if nc is not None and (not _is_int(nc) or nc != len(class_names)):
        raise DataFormatError(
            f"{where}: 'nc' is {nc!r:.40} but 'names' lists {len(class_names)} classes; "
            "set nc to that count or drop it"
        )
    ids = tuple(range(len(class_names)))
    if task != "pose":
        return DatasetSchema(task, class_names, ids), 0
    shape = cfg.get("kpt_shape")
    if not (
        isinstance(shape, list)
        and len(shape) == 2
        and all(_is_int(v) for v in shape)
        and shape[1] in (2, 3)
        and 0 < shape[0] <= MAX_KEYPOINTS
    ):
        raise DataFormatError(
            f"{where}: task 'pose' needs 'kpt_shape: [K, 2]' or '[K, 3]' with 1 <= K <= "
            f"{MAX_KEYPOINTS}, got {shape!r:.40}"
        )
    k, dims = int(shape[0]), int(shape[1])
    flip = cfg.get("flip_idx")
    if flip is not None and not (isinstance(flip, list) and all(_is_int(v) for v in flip)):
        raise DataFormatError(
            f"{where}: 'flip_idx' must be a list of keypoint indices, got {flip!r:.40}"
        )
    flip_index = tuple(flip) if flip is not None else tuple(range(k))
    if sorted(flip_index) != list(range(k)):
        raise DataFormatError(
            f"{where}: 'flip_idx' must order the {k} keypoints 0..{k - 1} once each, got "
            f"{list(flip_index)!r:.60}"
        )
    kpt_names = tuple(f"kpt_{i}" for i in range(k))
    return DatasetSchema(task, class_names, ids, kpt_names, flip_index), dims


def read_yolo(
    data_yaml: Path | str,
    split: str,
    *,
    task: Task,
    verify: Verify = "header",
    missing_labels: MissingLabels = "error",
) -> DatasetIndex:
    """Read one split of a YOLO txt dataset described by ``data_yaml``.

    Image ids are running numbers in sorted path order. The image size comes from its header, so
    ``verify='none'`` is not available here.
    """
    data_yaml = Path(data_yaml)
    cfg = read_data_yaml(data_yaml)
    base_name = cfg.get("path") or "."
    if not isinstance(base_name, str) or "\0" in base_name:
        raise DataFormatError(
            f"{data_yaml}: 'path' must be the dataset folder, got {base_name!r:.40}"
        )
    base = Path(base_name)
    root = base if base.is_absolute() else (data_yaml.parent / base)
    schema, dims = _schema(cfg, task, data_yaml)
    shape = cfg.get("kpt_shape")  # a pose set read for boxes keeps each line's box
    pose_values = (
        5 + int(shape[0]) * int(shape[1])
        if isinstance(shape, list) and len(shape) == 2 and all(_is_int(v) for v in shape)
        else None
    )
    report = LoadReport(f"{data_yaml} [{split}]")
    records: list[ImageRecord] = []
    listed: dict[Path, Path] = {}  # label path -> the image that took it, read or skipped
    read: set[str] = set()  # real paths of the images listed so far
    for image in split_images(root, cfg.get(split), data_yaml, split, report):
        if not image.is_file():  # a list's line, or a dangling link a folder's walk found
            reason = "image list line naming a folder (skipped)" if image.is_dir() else None
            report.skip(reason or "missing image file", str(image))
            continue
        real = os.path.realpath(image)
        if real in read:
            report.skip("image listed twice (read once)", str(image))
            continue
        read.add(real)
        first = listed.setdefault(label_path(image), image)
        if first != image:
            report.skip(
                "image sharing its label file with another image (skipped)",
                f"{image} (the label file is {first}'s)",
            )
            continue
        size = usable_size(image, verify)
        if isinstance(size, str):
            report.skip(size, str(image))
            continue
        lbl = label_path(image)
        refuse_label_file(image, lbl, missing_labels)
        if not lbl.is_file():
            report.skip(
                "missing label file (read as background)"
                if missing_labels == "background"
                else "missing label file (image skipped)",
                str(lbl),
            )
            if missing_labels == "skip":
                continue
            text = ""
        else:
            text = read_text(lbl)
        width, height = size
        targets = parse_label_text(
            text, schema, dims, width, height, str(lbl), report, pose_values=pose_values
        )
        records.append(ImageRecord(len(records), image, height, width, targets))
    count_orphan_labels(cfg.get(split), root, listed, report)
    report.log()
    return DatasetIndex(schema, records, report)


def parse_label_text(
    text: str,
    schema: DatasetSchema,
    dims: int,
    width: int,
    height: int,
    where: str,
    report: LoadReport | None = None,
    *,
    pose_values: int | None = None,
) -> Targets:
    """Parse one label file's text into pixel `Targets` (see the module docstring); a box
    without area is skipped, counted in ``report`` when given.

    For ``detect``, as the authors' loader reads a segment or pose set for a box task: a line of
    a class and at least 3 x y points is its polygon's enclosing box, and a line of
    ``pose_values`` values (``5 + K * D`` of the set's ``kpt_shape``) its box, the keypoints
    dropped; each counted in ``report``."""
    task, k = schema.task, schema.num_keypoints
    scale = np.array([width, height], np.float64)
    boxes, labels, rings, rboxes_in, kpts = [], [], [], [], []
    obb_at: list[str] = []
    seen: set[tuple[float, ...]] = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        at = f"{where}:{lineno}"
        try:
            values = [float(v) for v in line.split()]
        except ValueError as exc:
            fix = (
                "; separate a line's values with spaces, not commas (class cx cy w h)"
                if "," in line
                else "; each value is a number (class cx cy w h ...)"
            )
            raise DataFormatError(f"{at}: non-numeric value in {line.strip()!r:.80}{fix}") from exc
        if not all(math.isfinite(v) for v in values):
            raise DataFormatError(
                f"{at}: non-finite value (nan or inf) in {line.strip()!r}; write a number"
            )
        cls, coords = values[0], np.asarray(values[1:], np.float64)
        if task == "detect" and len(values) != 5:
            coords = _box_of_other_task(values, coords, pose_values, at, report)
        if cls != int(cls) or not 0 <= cls < schema.num_classes:
            raise DataFormatError(
                f"{at}: class {values[0]:g} is not an index 0..{schema.num_classes - 1} of 'names'"
            )
        expected = {"detect": "5", "obb": "9", "pose": str(5 + k * dims)}.get(task)
        if task == "segment":
            if coords.size % 2:
                raise DataFormatError(
                    f"{at}: a segment line needs a class then x y pairs, got an odd count of "
                    f"{coords.size} coordinate values; a value is missing or extra"
                )
            if coords.size == 4:  # class cx cy w h, or two points: say both
                raise DataFormatError(
                    f"{at}: a segment line needs a class and at least 3 x y points, got 4 "
                    "coordinate values: a box line (class cx cy w h) if the set holds boxes, "
                    "which a segment model cannot be trained or scored on (a detect model can: "
                    "--model without -seg); else remove the line or complete the polygon"
                )
            if coords.size < 6:
                raise DataFormatError(
                    f"{at}: a segment line needs a class and at least 3 x y points, got "
                    f"{coords.size} coordinate value(s); remove the line or complete the polygon"
                )
        elif coords.size + 1 != int(expected or 0):
            what = f" (kpt_shape [{k}, {dims}])" if task == "pose" else ""
            fix = ""
            if task == "detect" and len(values) > 5:  # no polygon (that is read as its box)
                fix = (
                    "; for a pose set, name its keypoints in data.yaml (kpt_shape: [K, D]) so "
                    "each line is read as its box, or train a -pose model"
                )
            raise DataFormatError(
                f"{at}: expected {expected} values for task {task!r}{what}, got {len(values)}{fix}"
            )
        key = tuple(values)  # the authors' reader drops a row equal to an earlier one
        if key in seen:
            if report is not None:
                report.skip(DUPLICATE_LINE, at)
            continue
        seen.add(key)
        check = coords
        slack_noted = False  # a line counted for its slack is not counted again for its box
        if task == "pose" and dims == 3:
            check = np.concatenate([coords[:4], coords[4:].reshape(k, 3)[:, :2].reshape(-1)])
        if ((check < 0) | (check > 1)).any():
            far = (check < -SLACK) | (check > 1 + SLACK)
            if far.any():
                raise DataFormatError(
                    f"{at}: value {float(check[far][0]):g} is outside [0, 1] by more than {SLACK}; "
                    "YOLO labels are normalised by the image size: divide x by the width and y by "
                    "the height"
                )
            if report is not None:
                report.skip(f"label values at most {SLACK} outside [0, 1]: clipped", at)
                slack_noted = True
            if task != "detect":  # points (box corners for detect and pose are clipped below)
                head = 4 if task == "pose" else 0
                pts = coords[head:].reshape(-1, dims if task == "pose" else 2)
                pts[:, :2] = pts[:, :2].clip(0, 1)
        extent = None
        if task in ("detect", "pose"):  # the box, clipped to the image as the authors' loader
            cx, cy, w, h = coords[:4] * np.tile(scale, 2)
            box = np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
            past = max(-box[0], -box[1], box[2] - scale[0], box[3] - scale[1])
            if past > CLIP_NOTED_PX and report is not None and not slack_noted:
                report.skip(CLIPPED, at)
            box = box.clip(0, np.tile(scale, 2))
            extent = box[2:] - box[:2]
        if task == "segment":
            ring = coords.reshape(-1, 2) * scale
            extent = ring.max(0) - ring.min(0)
        if extent is not None and (extent <= 0).any():
            if report is not None:
                report.skip("empty box (zero width or height)", at)
            continue
        labels.append(int(cls))
        if task in ("detect", "pose"):
            boxes.append(box.tolist())
        if task == "segment":
            rings.append(ring)
            boxes.append([*ring.min(0), *ring.max(0)])
        if task == "obb":
            rboxes_in.append(coords.reshape(4, 2) * scale)
            obb_at.append(at)
        if task == "pose":
            kp = coords[4:].reshape(k, dims)
            vis = _visibility(kp[:, 2], at, report) if dims == 3 else np.full(k, 2.0)
            kpts.append(np.concatenate([kp[:, :2] * scale, vis[:, None]], -1))
    n = len(labels)
    lab = np.asarray(labels, np.int64).reshape(n)
    if task == "obb":
        rb = fit_rboxes(np.stack(rboxes_in) if rboxes_in else np.zeros((0, 4, 2)))
        # four points on one line (or one point) fit a box without area, as a detect box of
        # zero width: skipped and counted (a float fit leaves ~1e-14 px, not 0)
        solid = (rb[:, 2:4] > EMPTY_SIDE_PX).all(1)
        if report is not None:
            for i in np.flatnonzero(~solid):
                report.skip("empty box (zero width or height)", obb_at[i])
        rb, lab = rb[solid], lab[solid]
        return Targets(boxes=rbox_envelopes(rb), labels=lab, rboxes=rb)
    box = np.asarray(boxes, np.float32).reshape(n, 4)
    if task == "segment":
        return Targets(boxes=box, labels=lab, polygons=tuple(r.astype(np.float32) for r in rings))
    if task == "pose":
        arr = np.stack(kpts) if kpts else np.zeros((0, k, 3))
        vis8 = arr[..., 2].astype(np.uint8)
        xy = np.where(vis8[..., None] > 0, arr[..., :2], 0).astype(np.float32)
        return Targets(boxes=box, labels=lab, keypoints=xy, keypoint_vis=vis8)
    return Targets(boxes=box, labels=lab)


def _visibility(v: np.ndarray, at: str, report: LoadReport | None) -> np.ndarray:
    """Keypoint visibilities as 0, 1 or 2. Another value in (0, 2] is labelled, as any
    non-zero one is in the authors' loss and metrics: 1 up to 1, else 2, counted; values
    outside [0, 2] are refused."""
    if ((v < 0) | (v > 2)).any():
        bad = float(v[(v < 0) | (v > 2)][0])
        raise DataFormatError(
            f"{at}: keypoint visibility {bad:g}; it must be 0 (not labelled), 1 (labelled, "
            "hidden) or 2 (labelled, visible)"
        )
    whole = np.where(v == 0, 0.0, np.where(v <= 1, 1.0, 2.0))
    if report is not None and (whole != v).any():
        report.skip("keypoint visibility not 0, 1 or 2: read as labelled (not 0)", at)
    return whole


def _box_of_other_task(
    values: list[float],
    coords: np.ndarray,
    pose_values: int | None,
    at: str,
    report: LoadReport | None,
) -> np.ndarray:
    """A detect line's ``cx cy w h`` from a pose or segment line; other lengths unchanged (the
    caller refuses them)."""
    if pose_values is not None and len(values) == pose_values:
        if report is not None:
            report.skip("pose line read as its box, keypoints dropped (task detect)", at)
        return coords[:4]
    if len(values) >= 7 and coords.size % 2 == 0:
        pts = coords.reshape(-1, 2)
        low, high = pts.min(0), pts.max(0)
        if report is not None:
            report.skip(
                "polygon (segment outline or OBB corners) read as its enclosing box (task detect)",
                at,
            )
        return np.concatenate([(low + high) / 2, high - low])
    return coords


def format_label_text(targets: Targets, task: Task, width: int, height: int) -> tuple[str, int]:
    """One label file's text for ``targets``, and how many values had to be clipped to [0, 1]."""
    scale = np.array([width, height], np.float64)
    lines, clipped = [], 0

    def norm(xy: np.ndarray) -> np.ndarray:
        nonlocal clipped
        v = (np.asarray(xy, np.float64).reshape(-1, 2) / scale).reshape(-1)
        clipped += int(((v < 0) | (v > 1)).sum())
        return v.clip(0, 1)

    for i in range(len(targets)):
        vals: list[float]
        if task == "segment" and targets.polygons is not None:
            vals = list(norm(targets.polygons[i]))
        elif task == "obb" and targets.rboxes is not None:
            vals = list(norm(rbox_corners(targets.rboxes[i : i + 1])[0]))
        else:
            x1, y1, x2, y2 = targets.boxes[i].astype(np.float64)
            vals = list(norm(np.array([(x1 + x2) / 2, (y1 + y2) / 2])))
            vals += list((np.array([x2 - x1, y2 - y1]) / scale).clip(0, 1))
            if (
                task == "pose"
                and targets.keypoints is not None
                and targets.keypoint_vis is not None
            ):
                xy = norm(targets.keypoints[i]).reshape(-1, 2)
                vis = targets.keypoint_vis[i].astype(np.float64)[:, None]
                vals += list(np.concatenate([xy, vis], -1).reshape(-1))
        body = " ".join(f"{v:.10g}" for v in vals)
        lines.append(f"{int(targets.labels[i])} {body}")
    return "".join(line + "\n" for line in lines), clipped


def write_yolo(
    splits: Mapping[str, DatasetIndex], out_root: Path | str, *, link: bool = True
) -> Path:
    """Write ``splits`` (e.g. ``{"train": ..., "val": ...}``) as a YOLO txt dataset.

    Images are hard-linked when ``link`` and the file system allows it, else copied. Class indices
    are the contiguous labels; the COCO category ids are not kept (YOLO has none). Returns the path
    of the written ``data.yaml``.
    """
    out_root = Path(out_root)
    first = next(iter(splits.values()))
    schema = first.schema
    cfg: dict[str, Any] = {"path": "."}
    for split, index in splits.items():
        img_dir, lbl_dir = out_root / "images" / split, out_root / "labels" / split
        img_dir.mkdir(parents=True, exist_ok=True)
        lbl_dir.mkdir(parents=True, exist_ok=True)
        seen: set[str] = set()
        for rec in index.records:
            if rec.path.name in seen:
                raise DataFormatError(
                    f"{rec.path}: two images of split {split!r} share the name {rec.path.name}"
                )
            seen.add(rec.path.name)
            dst = img_dir / rec.path.name
            if not dst.exists():
                try:
                    if not link:
                        raise OSError
                    os.link(rec.path, dst)
                except OSError:
                    shutil.copyfile(rec.path, dst)
            text, _ = format_label_text(rec.targets, schema.task, rec.width, rec.height)
            (lbl_dir / rec.path.name).with_suffix(".txt").write_text(text)
        cfg[split] = f"images/{split}"
    cfg["nc"] = schema.num_classes
    cfg["names"] = dict(enumerate(schema.class_names))
    if schema.task == "pose":
        cfg["kpt_shape"] = [schema.num_keypoints, 3]
        cfg["flip_idx"] = list(schema.flip_index)
    path = out_root / "data.yaml"
    path.write_text(dump_data_yaml(cfg))
    return path
