"""Held-out sets from generators published by others, for the peer comparison (issue 37).

    PYTHONPATH=... python3 benchmarks/heldout_sets.py --cache DIR --sets vsynth-small,skimage-shapes

Each set is built deterministically from its seed into ``DIR/<name>-s<seed>/`` in the layout
``lucid fit --data.root`` reads (``annotations/{train,val}.json``, ``images/{train,val}/``):
COCO JSON with one polygon ring and its box per object, so one file serves detect and segment.
The comparison (`peer_data.prepare_data`) writes the peer's YOLO txt copy from the same COCO
read (`lucid_train.data.write_yolo`), so both trainers see one class list; every category has
annotations in both splits (no empty class: issue 37's confound). A set's box is its polygon's
extent, as the peer derives a segment box from the polygon, so the two read the same boxes.

The generators (dev-only dependency group ``heldout``; neither is ours, neither is imported by a
package):

* ``vsynth-small``: vision-synth 0.14.0.dev0 (Jiri Borovec, Apache-2.0), its scene generator
  (``synth_datasets.SyntheticGenerator``): 10-30 analytic shapes a 320 px canvas (square,
  rectangle, triangle, circle; rotated), 2.5-16 % of the side, on its value-noise texture with
  3 unlabelled distractors; most objects under 32² px. ``vsynth-2k`` is the same recipe with
  2,048 train / 256 val images: epochs long enough that the time to accuracy measures training,
  not a fit's fixed costs.
* ``skimage-shapes``: scikit-image 0.26 (BSD-3), ``skimage.draw.random_shapes``: 3-12
  non-overlapping shapes (rectangle, circle, triangle, ellipse) of 12-160 px on white, on
  canvases 480-640 px a side; each shape's mask is its own colour's pixels (the generator gives
  every shape a random colour and a box, not a mask), traced to a polygon at 1/4 px.

Each built set's counts and object sizes (its ``manifest.json``, the tables in
peer-accuracy.md) are printed as it is built.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

TRAIN, VAL = 256, 64
VERSION = 2  # bump when a set's recipe changes: the cache folder is keyed by it


def _coco(
    images: list[dict[str, Any]], anns: list[dict[str, Any]], names: list[str]
) -> dict[str, Any]:
    """A COCO document of ``images`` and ``anns`` with categories 1..len(names)."""
    cats = [{"id": i + 1, "name": n, "supercategory": "shape"} for i, n in enumerate(names)]
    return {"images": images, "annotations": anns, "categories": cats}


def _box_of(ring: list[float]) -> list[float]:
    xy = np.asarray(ring, np.float64).reshape(-1, 2)
    lo, hi = xy.min(0), xy.max(0)
    return [float(lo[0]), float(lo[1]), float(hi[0] - lo[0]), float(hi[1] - lo[1])]


def _polygon_area(ring: list[float]) -> float:
    x, y = np.asarray(ring, np.float64).reshape(-1, 2).T
    return float(abs(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1))) / 2)


# ---------------------------------------------------------------------------------------------
# vision-synth


def build_vsynth_small(root: Path, seed: int, train: int, val: int) -> dict[str, Any]:
    """vision-synth's scene generator, many small objects at 320 px; COCO split files of its
    writer, moved into our layout and renumbered (its two splits both start at image id 0)."""
    import synth_datasets as sd

    config = sd.SyntheticConfig(
        img_size=320, min_objects=10, max_objects=30, min_size_ratio=0.025,
        max_size_ratio=0.16, background=sd.TextureBackground(), distractors=3,
        task="segmentation",
    )  # fmt: skip
    raw = root / "raw"
    total = train + val
    sd.generate_dataset(
        raw, num_images=total, fmt="coco", seed=seed, config=config,
        split_ratios=sd.SplitRatios.custom({"train": train / total, "val": val / total}),
    )  # fmt: skip
    names: list[str] = []
    for split in ("train", "val"):
        doc = json.loads((raw / split / "_annotations.coco.json").read_text())
        names = names or [c["name"] for c in sorted(doc["categories"], key=lambda c: c["id"])]
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        ids = {im["id"]: k + 1 for k, im in enumerate(doc["images"])}
        images = []
        for im in doc["images"]:
            shutil.move(
                str(raw / split / im["file_name"]), root / "images" / split / im["file_name"]
            )
            images.append({**im, "id": ids[im["id"]]})
        anns = []
        for a in doc["annotations"]:
            ring = [float(v) for v in a["segmentation"][0]]
            ann = {"id": len(anns) + 1, "image_id": ids[a["image_id"]],
                   "category_id": int(a["category_id"]), "bbox": _box_of(ring),
                   "area": _polygon_area(ring), "iscrowd": 0}  # fmt: skip
            anns.append({**ann, "segmentation": [ring]})
        _write_split(root, split, _coco(images, anns, names))
    shutil.rmtree(raw)
    return {"generator": "vision-synth", "version": _version("vision-synth"),
            "licence": "Apache-2.0", "author": "Jiri Borovec (Borda)",
            "call": "synth_datasets.generate_dataset(fmt='coco', seed=SEED, config="
                    f"SyntheticConfig({_describe(config)}))"}  # fmt: skip


def _describe(config: Any) -> str:
    keys = ("img_size", "min_objects", "max_objects", "min_size_ratio", "max_size_ratio",
            "distractors", "rotate")  # fmt: skip
    parts = [f"{k}={getattr(config, k)!r}" for k in keys]
    return ", ".join(
        [*parts, f"background={type(config.background).__name__}()", "task='segmentation'"]
    )


# ---------------------------------------------------------------------------------------------
# scikit-image


SKIMAGE_SHAPES = ("rectangle", "circle", "triangle", "ellipse")


def _ring_of(mask: np.ndarray, up: int = 4) -> list[float] | None:
    """The outline of ``mask``'s largest component along pixel edges, to 1/``up`` px: the mask is
    upsampled ``up`` times and traced (a trace runs through pixel centres, which at ``up`` sits
    1/(2 ``up``) px inside the edge), so the ring's extent is the mask's box within 1/8 px."""
    import cv2

    big = np.kron(mask.astype(np.uint8), np.ones((up, up), np.uint8))
    contours, _ = cv2.findContours(big, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    if not contours:
        return None
    c = max(contours, key=cv2.contourArea)
    c = cv2.approxPolyDP(c, 1.0, True).reshape(-1, 2).astype(np.float64)
    if len(c) < 3:
        return None
    c = (c + 0.5) / up
    return [round(float(v), 3) for v in c.reshape(-1)]


def build_skimage_shapes(root: Path, seed: int, train: int, val: int) -> dict[str, Any]:
    """``skimage.draw.random_shapes`` on canvases of 480-640 px; each label's mask is the pixels
    of the one colour whose extent is its box (colours are drawn per shape, 255 is background)."""
    import cv2
    from skimage.draw import random_shapes

    params = {"max_shapes": 12, "min_shapes": 3, "min_size": 12, "max_size": 160,
              "allow_overlap": False, "num_trials": 100}  # fmt: skip
    sizes = np.random.default_rng(seed).integers(480, 641, size=(train + val, 2))
    dropped = 0
    k = 0
    for split, count in (("train", train), ("val", val)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        images, anns = [], []
        for i in range(count):
            h, w = (int(v) for v in sizes[k])
            image, labels = random_shapes((h, w), rng=seed * 100_003 + k, channel_axis=-1,
                                          **params)  # type: ignore[arg-type]  # fmt: skip
            k += 1
            name = f"{split}_{i:05d}.jpg"
            cv2.imwrite(str(root / "images" / split / name), image[..., ::-1],
                        [cv2.IMWRITE_JPEG_QUALITY, 92])  # fmt: skip
            images.append({"id": i + 1, "file_name": name, "width": w, "height": h})
            key = image.astype(np.int64) @ np.array([65536, 256, 1])
            for shape, ((r0, r1), (c0, c1)) in labels:
                r0, c0 = max(r0, 0), max(c0, 0)  # its triangles' boxes can start above the top
                crop = key[r0 : r1 + 1, c0 : c1 + 1]
                best, colour = 0.0, None
                for value in np.unique(crop):
                    if value == 0xFFFFFF:
                        continue
                    rows, cols = np.nonzero(key == value)
                    inter = (min(rows.max(), r1) - max(rows.min(), r0) + 1) * (
                        min(cols.max(), c1) - max(cols.min(), c0) + 1)  # fmt: skip
                    union = (
                        (np.ptp(rows) + 1) * (np.ptp(cols) + 1)
                        + (r1 - r0 + 1) * (c1 - c0 + 1)
                        - inter
                    )
                    if inter > 0 and inter / union > best:
                        best, colour = inter / union, value
                ring = _ring_of(key == colour) if colour is not None and best > 0.5 else None
                if ring is None:
                    dropped += 1
                    continue
                anns.append({"id": len(anns) + 1, "image_id": i + 1,
                             "category_id": SKIMAGE_SHAPES.index(shape) + 1,
                             "bbox": _box_of(ring), "area": float((key == colour).sum()),
                             "iscrowd": 0, "segmentation": [ring]})  # fmt: skip
        _write_split(root, split, _coco(images, anns, list(SKIMAGE_SHAPES)))
    return {"generator": "scikit-image", "version": _version("scikit-image"),
            "licence": "BSD-3-Clause", "author": "the scikit-image team",
            "call": f"skimage.draw.random_shapes((h, w), rng=SEED*100003+k, channel_axis=-1, "
                    f"**{params!r}), h, w ~ U[480, 640]",
            "labels_without_mask": dropped}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# common


@dataclass(frozen=True)
class Recipe:
    """A set's builder (``root, seed, train, val`` -> its manifest's facts) and its image counts."""

    builder: Callable[[Path, int, int, int], dict[str, Any]]
    train: int = TRAIN
    val: int = VAL


BUILDERS: dict[str, Recipe] = {
    "vsynth-small": Recipe(build_vsynth_small),
    "skimage-shapes": Recipe(build_skimage_shapes),
    # The same scenes eight times over: a set whose epochs outweigh a fit's fixed costs (the
    # launch's imports, the graphs' recording), for the time to accuracy.
    "vsynth-2k": Recipe(build_vsynth_small, train=2048, val=256),
}


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


def _write_split(root: Path, split: str, doc: dict[str, Any]) -> None:
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "annotations" / f"{split}.json").write_text(json.dumps(doc))


def set_root(cache: Path, name: str, seed: int = 0) -> Path:
    return cache / f"{name}-s{seed}-v{VERSION}"


def build(
    cache: Path, name: str, seed: int = 0, train: int | None = None, val: int | None = None
) -> Path:
    """The set ``name`` of ``seed`` under ``cache`` with ``train`` / ``val`` images (the
    recipe's counts by default), built once: a folder whose ``manifest.json`` has those counts
    is reused, so a carried cache builds nothing. Returns its COCO root."""
    recipe = BUILDERS[name]
    train = recipe.train if train is None else train
    val = recipe.val if val is None else val
    root = set_root(cache, name, seed)
    if (root / "manifest.json").is_file():
        built = json.loads((root / "manifest.json").read_text())
        if (built["train"], built["val"]) == (train, val):
            return root
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    info = recipe.builder(root, seed, train, val)
    _check_classes(root)
    manifest = {"name": name, "seed": seed, "train": train, "val": val, "recipe": VERSION, **info,
                "stats": stats(root)}  # fmt: skip
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return root


def _check_classes(root: Path) -> None:
    """Every category has annotations in both splits: an empty class would train as an always
    negative one on our side and be dropped by a YOLO export (issue 37's confound)."""
    for split in ("train", "val"):
        doc = json.loads((root / "annotations" / f"{split}.json").read_text())
        used = {a["category_id"] for a in doc["annotations"]}
        empty = [c["name"] for c in doc["categories"] if c["id"] not in used]
        if empty:
            raise ValueError(f"{root} {split}: categories without annotations: {empty}")


def stats(root: Path) -> dict[str, Any]:
    """Counts and object sizes (COCO's area of the box, the size buckets pycocotools scores)."""
    out: dict[str, Any] = {}
    for split in ("train", "val"):
        doc = json.loads((root / "annotations" / f"{split}.json").read_text())
        wh = np.array([a["bbox"][2:] for a in doc["annotations"]], np.float64).reshape(-1, 2)
        area = np.array([a["area"] for a in doc["annotations"]], np.float64)
        side = np.sqrt(wh.prod(1))
        counts = np.bincount([a["category_id"] for a in doc["annotations"]])[1:]
        dims = sorted({(im["width"], im["height"]) for im in doc["images"]})
        out[split] = {
            "images": len(doc["images"]),
            "instances": len(doc["annotations"]),
            "per_image": round(len(doc["annotations"]) / max(1, len(doc["images"])), 2),
            "per_class": {
                c["name"]: int(n) for c, n in zip(doc["categories"], counts, strict=True)
            },
            "image_sides": [min(min(d) for d in dims), max(max(d) for d in dims)],
            "small_lt_32sq": round(float((area < 32**2).mean()), 3),
            "medium": round(float(((area >= 32**2) & (area < 96**2)).mean()), 3),
            "large_ge_96sq": round(float((area >= 96**2).mean()), 3),
            "box_side_px_p5_p50_p95": [
                round(float(v), 1) for v in np.percentile(side, [5, 50, 95])
            ],
            "under_16px_side": round(float((side < 16).mean()), 3),
        }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--sets", default=",".join(BUILDERS))
    parser.add_argument("--seed", type=int, default=0, help="the set's seed (not the fit's)")
    parser.add_argument("--train", type=int, default=None, help="train images (the set's own)")
    parser.add_argument("--val", type=int, default=None, help="val images (the set's own)")
    args = parser.parse_args(argv)
    for name in [s for s in args.sets.split(",") if s]:
        root = build(args.cache, name, args.seed, args.train, args.val)
        manifest = json.loads((root / "manifest.json").read_text())
        size = sum(f.stat().st_size for f in (root / "images").rglob("*") if f.is_file())
        print(f"{root}: {size / 2**20:.1f} MiB of images")
        print(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
