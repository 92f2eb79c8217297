"""The drawing of the harder benchmark sets (``SyntheticSpec.hard()``), one scene kind per task.

The built-in sets are easy on purpose (a few large objects on a smooth background): both trainers
reach 0.86-0.89 mAP50-95 on them and cannot be told apart. These scenes carry what real data
has and those lack:

* textured backgrounds (random gratings and noise) under clutter: irregular polygons, strokes
  and *confusers*, shapes of no class in the classes' own colours;
* many objects an image (detect/segment 4-14, obb 5-15, pose 2-7), partly occluding each other;
* sizes drawn log-uniformly down to a few pixels at a 320 canvas (radius 2-15 % of the side);
* class imbalance (detect/segment 45/30/15/10 %, obb 50/35/15 %);
* mixed image sizes and aspect ratios (sides drawn independently);
* thin shapes that alias when downscaled (``ring`` outlines 1-3 px wide, ``needle`` bars 2-4 px
  across, pose limbs 1-3 px);
* COCO's id habits: non-contiguous category ids and one category without annotations
  (detect/segment ``hexagon``, obb ``panel``; pose keeps its one category).

Boxes and masks are amodal (the whole drawn shape, occluded parts included); occlusion is kept
partial by the placement rule. Everything is drawn with numpy's PCG64 and Pillow, so a seed
gives the same pixels on any machine.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from lucid_train.data.builtin_sets.shapes import bar_ring, place, stick_figure

__all__ = ["HARD_CATEGORIES", "hard_scene"]

# (id, name) per task; the last detect/obb category never gets an annotation.
HARD_CATEGORIES: dict[str, tuple[tuple[int, str], ...]] = {
    "detect": ((1, "circle"), (3, "square"), (4, "triangle"), (8, "ring"), (10, "hexagon")),
    "obb": ((2, "needle"), (5, "plank"), (9, "tile"), (11, "panel")),
    "pose": ((1, "figure"),),
}
HARD_CATEGORIES["segment"] = HARD_CATEGORIES["detect"]
SHAPE_WEIGHTS = (0.45, 0.30, 0.15, 0.10)
BAR_WEIGHTS = (0.50, 0.35, 0.15)
CLASS_COLOURS = ((220, 40, 40), (40, 190, 60), (50, 80, 230), (235, 200, 40))
BAR_ASPECTS = ((6.0, 12.0), (2.2, 3.2), (1.2, 1.6))


def _textured(rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    """A float (h, w, 3) background: a muted base, 3-6 gratings, speckle noise."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.broadcast_to(rng.uniform(60, 170, size=3).astype(np.float32), (h, w, 3)).copy()
    for _ in range(int(rng.integers(3, 7))):
        angle = rng.uniform(0, math.pi)
        period = math.exp(rng.uniform(math.log(4), math.log(80)))
        phase = rng.uniform(0, 2 * math.pi)
        wave = np.sin((xx * math.cos(angle) + yy * math.sin(angle)) * 2 * math.pi / period + phase)
        img += wave[..., None] * rng.uniform(3, 16, size=3).astype(np.float32)
    img += rng.normal(0, 8, size=(h, w, 1)).astype(np.float32)
    return img


def _colour(rng: np.random.Generator, base: tuple[int, int, int]) -> tuple[int, int, int]:
    c = np.clip(np.asarray(base) * rng.uniform(0.7, 1.1) + rng.uniform(-25, 25, 3), 0, 255)
    return (int(c[0]), int(c[1]), int(c[2]))


def _any_colour(rng: np.random.Generator) -> tuple[int, int, int]:
    if rng.uniform() < 0.5:  # a confuser in a class colour
        return _colour(rng, CLASS_COLOURS[int(rng.integers(0, len(CLASS_COLOURS)))])
    c = rng.uniform(30, 230, size=3)
    return (int(c[0]), int(c[1]), int(c[2]))


def _clutter(rng: np.random.Generator, draw: ImageDraw.ImageDraw, w: int, h: int) -> None:
    """Irregular polygons, pentagons/stars (no class has them) and strokes under the objects."""
    side = min(w, h)
    for _ in range(int(rng.integers(10, 25))):
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        r = side * math.exp(rng.uniform(math.log(0.01), math.log(0.08)))
        kind = int(rng.integers(0, 3))
        colour = _any_colour(rng)
        if kind == 0:  # irregular blob
            n = int(rng.integers(5, 9))
            a = np.sort(rng.uniform(0, 2 * math.pi, n))
            rr = r * rng.uniform(0.5, 1.2, n)
            pts = [(cx + q * math.cos(t), cy + q * math.sin(t)) for q, t in zip(rr, a, strict=True)]
            draw.polygon(pts, fill=colour)
        elif kind == 1:  # a five-pointed star or pentagon: the shape is the only cue
            n = 5 if rng.uniform() < 0.5 else 10
            a = rng.uniform(0, 2 * math.pi) + np.arange(n) * 2 * math.pi / n
            rr = np.where(np.arange(n) % 2 == 1, 0.45, 1.0) * r if n == 10 else np.full(n, r)
            pts = [(cx + q * math.cos(t), cy + q * math.sin(t)) for q, t in zip(rr, a, strict=True)]
            draw.polygon(pts, fill=colour)
        else:  # a stroke
            t = rng.uniform(0, math.pi)
            d = 2.5 * r * np.array([math.cos(t), math.sin(t)])
            draw.line([(cx - d[0], cy - d[1]), (cx + d[0], cy + d[1])], fill=colour,
                      width=int(rng.integers(1, 4)))  # fmt: skip


def _place(
    rng: np.random.Generator, w: int, h: int, r: float, taken: list[tuple[float, float, float]]
) -> tuple[float, float] | None:
    """Neighbours may overlap (partial occlusion) but not come closer than 0.6 of the summed
    radii."""
    return place(rng, w, h, r, taken, margin=1.0, spacing=0.6, tries=40)


def _log_size(rng: np.random.Generator, side: int, lo: float, hi: float) -> float:
    return side * math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _circle(cx: float, cy: float, r: float, n: int = 32) -> np.ndarray:
    a = np.arange(n) * 2 * math.pi / n
    return np.stack([cx + r * np.cos(a), cy + r * np.sin(a)], -1)


def _scene(rng: np.random.Generator, w: int, h: int) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    """A textured, cluttered ``w`` x ``h`` background and a pen on it."""
    img = Image.fromarray(np.clip(_textured(rng, w, h), 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    _clutter(rng, draw, w, h)
    return img, draw


def _shapes(rng: np.random.Generator, w: int, h: int) -> tuple[Image.Image, list[dict[str, Any]]]:
    img, draw = _scene(rng, w, h)
    ids = [c for c, _ in HARD_CATEGORIES["detect"]]
    anns: list[dict[str, Any]] = []
    taken: list[tuple[float, float, float]] = []
    for _ in range(int(rng.integers(4, 15))):
        kind = int(rng.choice(4, p=SHAPE_WEIGHTS))
        r = _log_size(rng, min(w, h), 0.02, 0.15)
        spot = _place(rng, w, h, r, taken)
        if spot is None:
            continue
        colour = _colour(rng, CLASS_COLOURS[int(rng.integers(0, len(CLASS_COLOURS)))])
        if kind == 3:  # ring: a thin outline, 1-3 px, that aliases when downscaled
            ring = _circle(*spot, r)
            draw.ellipse([spot[0] - r, spot[1] - r, spot[0] + r, spot[1] + r], outline=colour,
                         width=int(rng.integers(1, 4)))  # fmt: skip
        else:
            n, scale = ((32, 1.0), (4, 0.95), (3, 1.1))[kind]
            a = rng.uniform(0, 2 * math.pi) + np.arange(n) * 2 * math.pi / n
            ring = np.stack([spot[0] + r * scale * np.cos(a), spot[1] + r * scale * np.sin(a)], -1)
            ring = np.clip(ring, 0, [w, h])
            draw.polygon([(float(x), float(y)) for x, y in ring], fill=colour)
        anns.append({"category_id": ids[kind], "ring": ring})
    return img, anns


def _bars(rng: np.random.Generator, w: int, h: int) -> tuple[Image.Image, list[dict[str, Any]]]:
    img, draw = _scene(rng, w, h)
    ids = [c for c, _ in HARD_CATEGORIES["obb"]]
    anns: list[dict[str, Any]] = []
    taken: list[tuple[float, float, float]] = []
    for _ in range(int(rng.integers(5, 16))):
        kind = int(rng.choice(3, p=BAR_WEIGHTS))
        long_side = _log_size(rng, min(w, h), 0.05, 0.35)
        short = max(long_side / rng.uniform(*BAR_ASPECTS[kind]), 2.0 + 2.0 * rng.uniform())
        spot = _place(rng, w, h, long_side / 2, taken)
        if spot is None:
            continue
        ring = bar_ring(spot, long_side, short, rng.uniform(-math.pi / 2, math.pi / 2))
        colour = _colour(rng, CLASS_COLOURS[int(rng.integers(0, len(CLASS_COLOURS)))])
        draw.polygon([(float(x), float(y)) for x, y in ring], fill=colour)
        anns.append({"category_id": ids[kind], "ring": ring})
    return img, anns


def _figures(rng: np.random.Generator, w: int, h: int) -> tuple[Image.Image, list[dict[str, Any]]]:
    img, draw = _scene(rng, w, h)
    anns: list[dict[str, Any]] = []
    taken: list[tuple[float, float, float]] = []
    palette = ((240, 240, 240), (30, 30, 30), (240, 140, 30))
    for _ in range(int(rng.integers(2, 8))):
        height = _log_size(rng, min(w, h), 0.1, 0.5)
        spot = _place(rng, w, h, height / 2, taken)
        if spot is None:
            continue
        colour = _colour(rng, palette[int(rng.integers(0, 3))])
        anns.append(
            stick_figure(rng, draw, (w, h), spot, height, colour, lean=0.2, arms=(-60, 80),
                         legs=(50, 88), width=lambda: int(rng.integers(1, 4)), head=0.07)
        )  # fmt: skip
    return img, anns


_SCENES = {"detect": _shapes, "segment": _shapes, "obb": _bars, "pose": _figures}


def hard_scene(
    task: str, rng: np.random.Generator, w: int, h: int
) -> tuple[Image.Image, list[dict[str, Any]]]:
    """One ``w`` x ``h`` scene of ``task`` and its annotations (rings, or boxes + keypoints)."""
    return _SCENES[task](rng, w, h)
