"""Built-in synthetic datasets for the four tasks, written once to a cache folder in COCO layout.

Each set is a pure function of ``(task, seed, sizes)``: drawn with numpy's PCG64 and Pillow's
aliased polygon fill, saved as PNG (lossless), so the same arguments give the same pixels on any
machine. They land in ``<cache>/<name>/{images/<split>/*.png, annotations/<split>.json}`` and are
read back through `read_coco`, the same path as user data.

* ``detect`` / ``segment`` (``shapes``): circles, squares and triangles in red, green and blue
  on a smooth muted background; boxes are the polygons' envelopes.
* ``obb`` (``bars``): rotated rectangles of three aspect ranges and colours, as 4-point rings.
* ``pose`` (``figures``): stick figures with 7 named keypoints; ``left_*`` is the figure's left,
  i.e. the image's right, as in COCO.

Objects are large (a fifth to a third of the image side) and the classes differ in shape and
colour, so a few minutes of CPU training learn them visibly. Export to YOLO txt with
``python -m lucid_train.data.builtin_sets --task detect --yolo OUT``.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from PIL import Image, ImageDraw

from lucid_train.data.builtin_sets.hard_scenes import HARD_CATEGORIES, hard_scene
from lucid_train.data.builtin_sets.shapes import (
    FIGURE_KEYPOINTS,
    FIGURE_SKELETON,
    bar_ring,
    place,
    stick_figure,
)
from lucid_train.data.polygons import polygon_area
from lucid_train.data.records import Task
from lucid_train.errors import LucidError

VERSION = 1  # the drawing: changing it changes every image (and seeds the generator)
# The files written around the drawing; revision 2 numbers annotation ids uniquely (revision 1
# repeated them per image, which pycocotools silently mis-indexes). A new revision regenerates
# the cache with the same images.
FORMAT_REVISION = 2
SHAPE_CLASSES = ("circle", "square", "triangle")
SHAPE_COLOURS = ((220, 40, 40), (40, 190, 60), (50, 80, 230))
BAR_CLASSES = ("needle", "plank", "tile")
BAR_COLOURS = ((230, 60, 200), (235, 200, 40), (40, 200, 220))
BAR_ASPECTS = ((4.0, 6.0), (2.2, 3.2), (1.3, 1.7))


@dataclass(frozen=True)
class SyntheticSpec:
    """Size of a synthetic set: images per split, the range of image sides in pixels, and the
    scenes: ``easy`` (the built-in sets) or ``hard`` (`lucid_train.data.builtin_sets.hard_scenes`,
    the benchmark sets that tell trainers apart; `SyntheticSpec.hard` has their sizes)."""

    num_train: int = 400
    num_val: int = 100
    min_side: int = 256
    max_side: int = 384
    difficulty: Literal["easy", "hard"] = "easy"

    @classmethod
    def hard(cls, num_train: int = 256, num_val: int = 64) -> SyntheticSpec:
        """The harder benchmark set: sides 480-800 drawn independently (mixed aspect)."""
        return cls(num_train, num_val, min_side=480, max_side=800, difficulty="hard")


def default_cache_dir() -> Path:
    """``$LUCID_CACHE_DIR``, else ``$XDG_CACHE_HOME/lucid``, else ``~/.cache/lucid``."""
    if os.environ.get("LUCID_CACHE_DIR"):
        return Path(os.environ["LUCID_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lucid"


class CacheFolderError(LucidError, OSError):
    """The folder the synthetic sets are cached in cannot be created or written."""


def _unwritable_cache(base: Path, err: OSError, given: bool) -> CacheFolderError:
    """The error for a cache folder that cannot be written, naming the setting that put it there
    (a read-only or missing HOME is not the run folder's fault)."""
    fix = "set LUCID_CACHE_DIR to a folder you can write"
    if given:
        origin, fix = "--data.cache_dir", "pick a folder you can write with --data.cache_dir"
    elif os.environ.get("LUCID_CACHE_DIR"):
        origin = "LUCID_CACHE_DIR"
    elif "XDG_CACHE_HOME" in os.environ:
        origin = "$XDG_CACHE_HOME/lucid"
    else:
        origin, fix = f"~/.cache/lucid; HOME is {Path.home()}", f"{fix}, or make HOME writable"
    return CacheFolderError(
        f"cannot write {base}, the built-in synthetic set's cache folder ({origin}): "
        f"{err.strerror or err}; {fix}, or train on your own data with --data.root"
    )


def _background(rng: np.random.Generator, w: int, h: int) -> Image.Image:
    base = rng.uniform(90, 170, size=3)
    tilt = rng.uniform(-40, 40, size=(2, 3))
    yy, xx = np.mgrid[0:h, 0:w]
    img = base + (xx[..., None] / w - 0.5) * tilt[0] + (yy[..., None] / h - 0.5) * tilt[1]
    img = img * 0.6 + 40  # keep the background muted so the saturated objects stand out
    img += rng.normal(0, 6, size=(h, w, 1))
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def _jitter(rng: np.random.Generator, colour: tuple[int, int, int]) -> tuple[int, int, int]:
    c = np.clip(np.asarray(colour) * rng.uniform(0.8, 1.1) + rng.uniform(-15, 15, 3), 0, 255)
    return (int(c[0]), int(c[1]), int(c[2]))


def _draw(draw: ImageDraw.ImageDraw, ring: np.ndarray, colour: tuple[int, int, int]) -> None:
    # Unshifted continuous coordinates: ImageDraw's fill then grows the shape by half a pixel on
    # every side (see lucid_train.data.masks), so pixels stay centred on the annotated ring.
    draw.polygon([(float(x), float(y)) for x, y in ring], fill=colour)


def _shape_ring(rng: np.random.Generator, kind: int, cx: float, cy: float, r: float) -> np.ndarray:
    a0 = rng.uniform(0, 2 * math.pi)
    n = {0: 32, 1: 4, 2: 3}[kind]
    scale = {0: 1.0, 1: 0.95, 2: 1.1}[kind]
    a = a0 + np.arange(n) * 2 * math.pi / n
    return np.stack([cx + r * scale * np.cos(a), cy + r * scale * np.sin(a)], -1)


def _shapes_image(
    rng: np.random.Generator, w: int, h: int
) -> tuple[Image.Image, list[dict[str, Any]]]:
    img = _background(rng, w, h)
    draw = ImageDraw.Draw(img)
    anns: list[dict[str, Any]] = []
    taken: list[tuple[float, float, float]] = []
    for _ in range(int(rng.integers(1, 6))):
        kind = int(rng.integers(0, 3))
        r = float(rng.uniform(0.1, 0.18) * min(w, h))
        spot = place(rng, w, h, r, taken)
        if spot is None:
            continue
        ring = _shape_ring(rng, kind, *spot, r)
        _draw(draw, ring, _jitter(rng, SHAPE_COLOURS[kind]))
        anns.append({"category_id": kind + 1, "ring": ring})
    return img, anns


def _bars_image(
    rng: np.random.Generator, w: int, h: int
) -> tuple[Image.Image, list[dict[str, Any]]]:
    img = _background(rng, w, h)
    draw = ImageDraw.Draw(img)
    anns: list[dict[str, Any]] = []
    taken: list[tuple[float, float, float]] = []
    for _ in range(int(rng.integers(1, 6))):
        kind = int(rng.integers(0, 3))
        long_side = float(rng.uniform(0.25, 0.4) * min(w, h))
        short = long_side / rng.uniform(*BAR_ASPECTS[kind])
        spot = place(rng, w, h, long_side / 2, taken)
        if spot is None:
            continue
        ring = bar_ring(spot, long_side, short, rng.uniform(-math.pi / 2, math.pi / 2))
        _draw(draw, ring, _jitter(rng, BAR_COLOURS[kind]))
        anns.append({"category_id": kind + 1, "ring": ring})
    return img, anns


def _figures_image(
    rng: np.random.Generator, w: int, h: int
) -> tuple[Image.Image, list[dict[str, Any]]]:
    img = _background(rng, w, h)
    draw = ImageDraw.Draw(img)
    anns: list[dict[str, Any]] = []
    taken: list[tuple[float, float, float]] = []
    for _ in range(int(rng.integers(1, 4))):
        height = float(rng.uniform(0.35, 0.6) * min(w, h))
        spot = place(rng, w, h, height / 2, taken)
        if spot is None:
            continue
        cx, cy = spot
        colour = _jitter(
            rng, ((240, 240, 240), (30, 30, 30), (240, 140, 30))[int(rng.integers(0, 3))]
        )
        anns.append(
            stick_figure(rng, draw, (w, h), (cx, cy), height, colour, lean=0.15,
                         arms=(-40, 70), legs=(55, 85), width=max(2, round(height * 0.06)),
                         head=0.08)
        )  # fmt: skip
    return img, anns


_GENERATORS = {
    "detect": _shapes_image,
    "segment": _shapes_image,
    "obb": _bars_image,
    "pose": _figures_image,
}


def _categories(task: Task, difficulty: str = "easy") -> list[dict[str, Any]]:
    if task == "pose":
        return [
            {
                "id": 1,
                "name": "figure",
                "supercategory": "figure",
                "keypoints": list(FIGURE_KEYPOINTS),
                "skeleton": [[a + 1, b + 1] for a, b in FIGURE_SKELETON],
            }
        ]
    if difficulty == "hard":
        return [{"id": i, "name": n, "supercategory": "shape"} for i, n in HARD_CATEGORIES[task]]
    names = BAR_CLASSES if task == "obb" else SHAPE_CLASSES
    return [{"id": i + 1, "name": n, "supercategory": "shape"} for i, n in enumerate(names)]


def _annotation(ann: dict[str, Any], ann_id: int, image_id: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": ann_id,
        "image_id": image_id,
        "category_id": ann["category_id"],
        "iscrowd": 0,
    }
    if "ring" in ann:
        ring = ann["ring"]
        lo, hi = ring.min(0), ring.max(0)
        out["segmentation"] = [[round(float(v), 3) for v in ring.reshape(-1)]]
        out["area"] = polygon_area(ring)
    else:
        lo, hi = ann["box"][:2], ann["box"][2:]
        kp = np.concatenate([ann["keypoints"], ann["vis"][:, None]], -1)
        out["keypoints"] = [round(float(v), 3) for v in kp.reshape(-1)]
        out["num_keypoints"] = int((ann["vis"] > 0).sum())
        out["area"] = float((hi - lo).prod())
        box_ring = [lo[0], lo[1], hi[0], lo[1], hi[0], hi[1], lo[0], hi[1]]
        out["segmentation"] = [[round(float(v), 3) for v in box_ring]]
    # Round the corners, not the size, so x + w is exactly the rounded right edge of the ring.
    lo_r, hi_r = [round(float(v), 3) for v in lo], [round(float(v), 3) for v in hi]
    out["bbox"] = [lo_r[0], lo_r[1], hi_r[0] - lo_r[0], hi_r[1] - lo_r[1]]
    return out


def _write(task: Task, root: Path, seed: int, spec: SyntheticSpec) -> None:
    gen = _GENERATORS[task]
    if spec.difficulty == "hard":

        def gen(rng: np.random.Generator, w: int, h: int) -> Any:
            return hard_scene(task, rng, w, h)

    for split_no, (split, count) in enumerate((("train", spec.num_train), ("val", spec.num_val))):
        rng = np.random.default_rng(np.random.SeedSequence([seed, split_no, VERSION]))
        img_dir = root / "images" / split
        img_dir.mkdir(parents=True)
        images: list[dict[str, Any]] = []
        anns: list[dict[str, Any]] = []
        for i in range(count):
            steps = (spec.max_side - spec.min_side) // 32 + 1
            w, h = (spec.min_side + 32 * int(v) for v in rng.integers(0, steps, size=2))
            img, drawn = gen(rng, w, h)
            name = f"{i:06d}.png"
            img.save(img_dir / name, optimize=False, compress_level=1)
            images.append({"id": i + 1, "file_name": name, "width": w, "height": h})
            for a in drawn:
                anns.append(_annotation(a, len(anns) + 1, i + 1))
        doc = {
            "info": {
                "description": f"lucid synthetic {task} {spec.difficulty} v{VERSION} seed {seed}"
            },
            "images": images,
            "annotations": anns,
            "categories": _categories(task, spec.difficulty),
        }
        (root / "annotations").mkdir(exist_ok=True)
        (root / "annotations" / f"{split}.json").write_text(json.dumps(doc))


def synthetic_dataset(
    task: Task,
    *,
    cache_dir: Path | str | None = None,
    seed: int = 0,
    spec: SyntheticSpec | None = None,
) -> Path:
    """The folder of the synthetic set for ``task``, generating it on first use.

    Generation writes to a temporary sibling and renames it into place, so a concurrent or
    interrupted run never leaves a half-written set behind.

    Raises:
        CacheFolderError: the cache folder cannot be created or written (named, with the
            setting that chose it: ``cache_dir``, ``LUCID_CACHE_DIR`` or HOME).
    """
    if task not in _GENERATORS:
        raise ValueError(f"unknown task {task!r}; expected one of {sorted(_GENERATORS)}")
    spec = spec or SyntheticSpec()
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    sizes = f"{spec.num_train}x{spec.num_val}-{spec.min_side}to{spec.max_side}"
    kind = "" if spec.difficulty == "easy" else f"-{spec.difficulty}"
    name = f"synthetic-{task}{kind}-v{VERSION}r{FORMAT_REVISION}-seed{seed}-{sizes}"
    root = base / name
    if (root / "annotations" / "val.json").is_file():
        return root
    try:
        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=base))
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise  # a full disk is said as such (`lucid_train.cli.command_errors`)
        raise _unwritable_cache(base, err, given=cache_dir is not None) from None
    try:
        _write(task, tmp, seed, spec)
        try:
            os.replace(tmp, root)
        except OSError:
            if not (root / "annotations" / "val.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def main(argv: list[str] | None = None) -> None:
    """``python -m lucid_train.data.builtin_sets --task T [--cache DIR] [--yolo OUT]``."""
    from lucid_train.data.formats.coco import read_coco
    from lucid_train.data.formats.yolo_txt import write_yolo

    parser = argparse.ArgumentParser(
        prog="python -m lucid_train.data.builtin_sets",
        description="Generate a built-in synthetic set; optionally export it to YOLO txt.",
    )
    parser.add_argument("--task", required=True, choices=sorted(_GENERATORS))
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="cache folder (default: %(default)s → ~/.cache/lucid)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--yolo", type=Path, default=None, help="also write a YOLO txt copy here")
    parser.add_argument("--num-train", type=int, default=None)
    parser.add_argument("--num-val", type=int, default=None)
    parser.add_argument(
        "--hard", action="store_true", help="the harder benchmark set (SyntheticSpec.hard)"
    )
    args = parser.parse_args(argv)
    base = SyntheticSpec.hard() if args.hard else SyntheticSpec()
    spec = replace(
        base,
        num_train=args.num_train if args.num_train is not None else base.num_train,
        num_val=args.num_val if args.num_val is not None else base.num_val,
    )
    root = synthetic_dataset(args.task, cache_dir=args.cache, seed=args.seed, spec=spec)
    print(root)
    if args.yolo is not None:
        splits = {
            s: read_coco(root / "annotations" / f"{s}.json", root / "images" / s, task=args.task)
            for s in ("train", "val")
        }
        print(write_yolo(splits, args.yolo))
