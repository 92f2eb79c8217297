"""The drawing both synthetic sets share: placing objects apart, stick figures and bars.

The built-in sets (`lucid_train.data.builtin_sets.synthetic`) and the harder benchmark
scenes (`lucid_train.data.builtin_sets.hard_scenes`) draw their pose figures and rotated bars
with these, with their own sizes, strokes and spacing; drawn with numpy's PCG64 and Pillow, so
a seed gives the same pixels on any machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import ImageDraw

__all__ = ["FIGURE_KEYPOINTS", "FIGURE_SKELETON", "bar_ring", "place", "stick_figure"]

FIGURE_KEYPOINTS = ("head", "neck", "left_hand", "right_hand", "hip", "left_foot", "right_foot")
FIGURE_SKELETON = ((0, 1), (1, 2), (1, 3), (1, 4), (4, 5), (4, 6))


def place(
    rng: np.random.Generator,
    w: int,
    h: int,
    r: float,
    taken: list[tuple[float, float, float]],
    *,
    margin: float = 2.0,
    spacing: float = 0.9,
    tries: int = 30,
) -> tuple[float, float] | None:
    """A centre keeping a disc of radius ``r`` ``margin`` px inside the image and farther than
    ``spacing`` x the summed radii from every centre in ``taken`` (below 1 lets neighbours
    overlap); appended to ``taken``. None when ``tries`` draws find none."""
    for _ in range(tries):
        cx, cy = rng.uniform(r + margin, w - r - margin), rng.uniform(r + margin, h - r - margin)
        if all(math.hypot(cx - x, cy - y) > spacing * (r + q) for x, y, q in taken):
            taken.append((cx, cy, r))
            return cx, cy
    return None


def stick_figure(
    rng: np.random.Generator,
    draw: ImageDraw.ImageDraw,
    size: tuple[int, int],
    centre: tuple[float, float],
    height: float,
    colour: tuple[int, int, int],
    *,
    lean: float,
    arms: tuple[float, float],
    legs: tuple[float, float],
    width: int | Callable[[], int],
    head: float,
) -> dict[str, Any]:
    """Draw one stick figure of ``height`` at ``centre`` and return its annotation (box,
    keypoints, visibility). ``lean`` is the largest lean as a fraction of the height, ``arms`` /
    ``legs`` the limb angle ranges in degrees, ``width`` the stroke (a callable is asked after
    the limbs are drawn from ``rng``), ``head`` the head radius as a fraction of the height."""
    w, h = size
    cx, cy = centre
    tilt = rng.uniform(-lean, lean) * height
    neck = np.array([cx + tilt / 2, cy - 0.25 * height])
    hip = np.array([cx - tilt / 2, cy + 0.1 * height])
    top = neck + np.array([tilt * 0.3, -0.15 * height])
    arm, leg = 0.3 * height, 0.4 * height

    def limb(origin: np.ndarray, length: float, lo: float, hi: float, side: int) -> np.ndarray:
        a = math.radians(rng.uniform(lo, hi))
        return origin + length * np.array([side * math.cos(a), math.sin(a)])

    # The figure faces the viewer: its left hand and foot are on the image's right (+x).
    kpts = np.stack([top, neck, limb(neck, arm, *arms, +1), limb(neck, arm, *arms, -1),
                     hip, limb(hip, leg, *legs, +1), limb(hip, leg, *legs, -1)])  # fmt: skip
    stroke = width() if callable(width) else width
    for a, b in FIGURE_SKELETON:
        draw.line([tuple(kpts[a]), tuple(kpts[b])], fill=colour, width=stroke)
    hr = head * height
    draw.ellipse([top[0] - hr, top[1] - hr, top[0] + hr, top[1] + hr], fill=colour)
    lo = np.clip(np.minimum(kpts.min(0) - stroke / 2, top - hr), 0, [w, h])
    hi = np.clip(np.maximum(kpts.max(0) + stroke / 2, top + hr), 0, [w, h])
    inside = (kpts[:, 0] >= 0) & (kpts[:, 0] <= w) & (kpts[:, 1] >= 0) & (kpts[:, 1] <= h)
    return {"category_id": 1, "box": np.concatenate([lo, hi]), "keypoints": kpts,
            "vis": np.where(inside, 2, 0)}  # fmt: skip


def bar_ring(
    centre: tuple[float, float], long_side: float, short: float, theta: float
) -> np.ndarray:
    """The 4 corners ``(4, 2)`` of a ``long_side`` x ``short`` bar at ``centre``, turned by
    ``theta`` radians from +x towards +y."""
    u = np.array([math.cos(theta), math.sin(theta)]) * long_side / 2
    v = np.array([-math.sin(theta), math.cos(theta)]) * short / 2
    c = np.array(centre)
    return np.stack([c - u - v, c + u - v, c + u + v, c - u + v])
