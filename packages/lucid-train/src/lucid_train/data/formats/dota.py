"""DOTA ``labelTxt`` annotations and the tiling of large aerial images into COCO-layout windows.

A DOTA split is ``<root>/<split>/images/*.png`` beside ``<root>/<split>/labelTxt/*.txt``; each
label line is ``x1 y1 x2 y2 x3 y3 x4 y4 class difficult`` in pixels (optional ``imagesource:`` and
``gsd:`` header lines are ignored). DOTA images are up to 20k pixels a side, so training reads
them through `tile_dota`, which cuts windows and writes a COCO layout that `read_coco` serves.

Tiling rule per instance and window (assumptions.md D7): clip the quadrilateral to the window;
``U`` = kept area / full area. ``U == 0``: not in this window. ``U < min_kept`` (0.7): kept as
*difficult*, refitted to the clipped part at its original orientation. Otherwise kept whole,
translated into the window (it may reach a little past the window edge).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from lucid_train.data.formats.input_checks import float32_finite, read_text
from lucid_train.data.image_io import IMAGE_SUFFIXES, Verify, open_rgb, usable_size
from lucid_train.data.polygons import clip_to_rect, polygon_area
from lucid_train.data.records import (
    DataFormatError,
    DatasetIndex,
    DatasetSchema,
    ImageRecord,
    LoadReport,
)
from lucid_train.data.rotated import fit_rboxes, rbox_corners, rbox_envelopes
from lucid_train.data.targets import Targets

DOTA_V1_CLASSES = (
    "plane",
    "ship",
    "storage-tank",
    "baseball-diamond",
    "tennis-court",
    "basketball-court",
    "ground-track-field",
    "harbor",
    "bridge",
    "large-vehicle",
    "small-vehicle",
    "helicopter",
    "roundabout",
    "soccer-ball-field",
    "swimming-pool",
)


def parse_label_txt(
    text: str, class_names: tuple[str, ...], where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One labelTxt file → quads ``(N, 4, 2)`` float64, labels ``(N,)``, difficult ``(N,)``."""
    lookup = {n: i for i, n in enumerate(class_names)}
    quads, labels, difficult = [], [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts or line.startswith(("imagesource:", "gsd:")):
            continue
        at = f"{where}:{lineno}"
        if len(parts) not in (9, 10):
            raise DataFormatError(
                f"{at}: expected 'x1 y1 ... x4 y4 class [difficult]', got {line.strip()!r}"
            )
        try:
            quad = np.asarray([float(v) for v in parts[:8]], np.float64).reshape(4, 2)
        except ValueError as exc:
            raise DataFormatError(f"{at}: non-numeric corner in {line.strip()!r}") from exc
        # A finite rotated box, not only finite corners: 1e200 squared overflows its area.
        with np.errstate(over="ignore", invalid="ignore"):
            finite = float32_finite(quad) and np.isfinite(fit_rboxes(quad[None])).all()
        if not finite:
            raise DataFormatError(
                f"{at}: corner out of range (nan, inf or too large) in {line.strip()!r}; "
                "corners are pixels of the image"
            )
        if parts[8] not in lookup:
            raise DataFormatError(
                f"{at}: class {parts[8]!r} is not one of {list(class_names)}; "
                "pass class_names= to read another DOTA version"
            )
        # DOTA's flag is 0 or 1: anything else (a typo, a second class word) was read as 1 unsaid
        flag = parts[9] if len(parts) == 10 else "0"
        if flag not in ("0", "1", "0.0", "1.0"):
            raise DataFormatError(
                f"{at}: difficult flag {flag!r} after the class; it must be 0 or 1 (or left out)"
            )
        quads.append(quad)
        labels.append(lookup[parts[8]])
        difficult.append(flag.startswith("1"))
    n = len(quads)
    return (
        np.asarray(quads, np.float64).reshape(n, 4, 2),
        np.asarray(labels, np.int64).reshape(n),
        np.asarray(difficult, np.bool_).reshape(n),
    )


def read_dota(
    root: Path | str,
    split: str,
    *,
    class_names: tuple[str, ...] = DOTA_V1_CLASSES,
    verify: Verify = "header",
) -> DatasetIndex:
    """Read ``<root>/<split>/{images,labelTxt}`` as an ``obb`` split (no tiling).

    A missing label file is an error (DOTA ships one per image, empty for backgrounds).
    """
    root = Path(root)
    img_dir, lbl_dir = root / split / "images", root / split / "labelTxt"
    report = LoadReport(f"{root / split}")
    schema = DatasetSchema("obb", class_names, tuple(range(len(class_names))))
    records: list[ImageRecord] = []
    for image in sorted(p for p in img_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES):
        lbl = lbl_dir / (image.stem + ".txt")
        if not lbl.is_file():
            what = (
                "a folder stands in place of the label file"
                if lbl.is_dir()
                else "label file missing"
            )
            raise DataFormatError(
                f"{lbl}: {what} of {image}; DOTA has one file per image (empty = background)"
            )
        size = usable_size(image, verify)
        if isinstance(size, str):
            report.skip(size, str(image))
            continue
        quads, labels, difficult = parse_label_txt(read_text(lbl), class_names, str(lbl))
        rb = fit_rboxes(quads)
        t = Targets(boxes=rbox_envelopes(rb), labels=labels, difficult=difficult, rboxes=rb)
        records.append(ImageRecord(len(records), image, size[1], size[0], t))
    report.log()
    return DatasetIndex(schema, records, report)


def tile_windows(
    width: int, height: int, patch: int = 1024, overlap: int = 200
) -> list[tuple[int, int, int, int]]:
    """Windows ``(x0, y0, x1, y1)`` covering the image; the last one in a row/column is flush with
    the far edge, so every pixel is covered whatever the size. Images smaller than ``patch``
    give one window of their own size."""
    if not 0 <= overlap < patch:
        raise ValueError(f"expected 0 <= overlap < patch, got overlap={overlap}, patch={patch}")
    stride = patch - overlap

    def starts(size: int) -> list[int]:
        if size <= patch:
            return [0]
        out = list(range(0, size - patch, stride))
        return [*out, size - patch]

    return [
        (x, y, min(x + patch, width), min(y + patch, height))
        for y in starts(height)
        for x in starts(width)
    ]


def tile_targets(
    quads: np.ndarray,
    labels: np.ndarray,
    difficult: np.ndarray,
    window: tuple[int, int, int, int],
    min_kept: float = 0.7,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Instances of one window (the rule in the module docstring): quads ``(M, 4, 2)`` float64 in
    window pixels, labels ``(M,)``, difficult ``(M,)``."""
    x0, y0, x1, y1 = window
    out_q, out_l, out_d = [], [], []
    rb = fit_rboxes(quads)
    for i in range(quads.shape[0]):
        q = quads[i] - np.array([x0, y0])
        full = polygon_area(q)
        kept = clip_to_rect(q, x1 - x0, y1 - y0)
        frac = polygon_area(kept) / full if full > 0 else 0.0
        if kept.shape[0] < 3 or frac <= 0:
            continue
        if frac < min_kept:
            # Refit to the kept part along the original axes so the angle survives the cut.
            theta = float(rb[i, 4])
            u = np.array([np.cos(theta), np.sin(theta)])
            v = np.array([-u[1], u[0]])
            pu, pv = kept @ u, kept @ v
            cu, cv = (pu.max() + pu.min()) / 2, (pv.max() + pv.min()) / 2
            c = u * cu + v * cv
            new = np.array([[c[0], c[1], pu.max() - pu.min(), pv.max() - pv.min(), theta]])
            q = rbox_corners(new)[0]
        out_q.append(q)
        out_l.append(int(labels[i]))
        out_d.append(bool(difficult[i]) or frac < min_kept)
    m = len(out_q)
    return (
        np.asarray(out_q, np.float64).reshape(m, 4, 2),
        np.asarray(out_l, np.int64).reshape(m),
        np.asarray(out_d, np.bool_).reshape(m),
    )


def tile_dota(
    root: Path | str,
    split: str,
    out_root: Path | str,
    *,
    patch: int = 1024,
    overlap: int = 200,
    min_kept: float = 0.7,
    class_names: tuple[str, ...] = DOTA_V1_CLASSES,
    keep_empty: bool = True,
) -> Path:
    """Cut a DOTA split into windows and write ``<out_root>/images/<split>/*.png`` plus
    ``<out_root>/annotations/<split>.json`` (4-point rings, a ``difficult`` key, and the source
    image and window per tile). Returns the annotation file, ready for `read_coco` with
    ``task='obb'``."""
    root, out_root = Path(root), Path(out_root)
    index = read_dota(root, split, class_names=class_names)
    img_out = out_root / "images" / split
    img_out.mkdir(parents=True, exist_ok=True)
    images: list[dict[str, Any]] = []
    anns: list[dict[str, Any]] = []
    for rec in index.records:
        quads, labels, difficult = parse_label_txt(
            read_text(root / split / "labelTxt" / (rec.path.stem + ".txt")),
            class_names,
            str(rec.path),
        )
        image = open_rgb(rec.path)
        for window in tile_windows(rec.width, rec.height, patch, overlap):
            q, lab, dif = tile_targets(quads, labels, difficult, window, min_kept)
            if not len(lab) and not keep_empty:
                continue
            name = f"{rec.path.stem}__{window[0]}_{window[1]}.png"
            image.crop(window).save(img_out / name)
            iid = len(images) + 1
            images.append(
                {
                    "id": iid,
                    "file_name": name,
                    "width": window[2] - window[0],
                    "height": window[3] - window[1],
                    "source_image": rec.path.name,
                    "window": list(window),
                }
            )
            for j in range(len(lab)):
                ring = q[j]
                lo, hi = ring.min(0), ring.max(0)
                anns.append(
                    {
                        "id": len(anns) + 1,
                        "image_id": iid,
                        "category_id": int(lab[j]),
                        "iscrowd": 0,
                        "bbox": [
                            float(lo[0]),
                            float(lo[1]),
                            float(hi[0] - lo[0]),
                            float(hi[1] - lo[1]),
                        ],
                        "area": polygon_area(ring),
                        "segmentation": [[float(v) for v in ring.reshape(-1)]],
                        "difficult": int(dif[j]),
                    }
                )
    cats = [{"id": i, "name": n} for i, n in enumerate(class_names)]
    ann_file = out_root / "annotations" / f"{split}.json"
    ann_file.parent.mkdir(parents=True, exist_ok=True)
    ann_file.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return ann_file
