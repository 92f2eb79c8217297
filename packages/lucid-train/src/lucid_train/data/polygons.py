"""Polygon area and clipping in float64 numpy (Sutherland–Hodgman).

Used by DOTA tiling (how much of an object a window keeps), by augmentation (clip a ring to the
canvas) and by the rotated evaluation (convex polygon IoU). Clipping a subject polygon against a
*convex* clip polygon is exact for convex subjects; for a non-convex subject the result may hold
zero-width bridges along the clip edge, which do not change its area.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


def signed_area(poly: npt.ArrayLike) -> float:
    """Shoelace area of ``poly`` ``(P, 2)``; positive when counter-clockwise with y up."""
    p = np.asarray(poly, np.float64)
    if p.shape[0] < 3:
        return 0.0
    x, y = p[:, 0], p[:, 1]
    # Slices instead of np.roll: this runs for every ring of every augmented sample.
    cross = x[:-1] @ y[1:] - x[1:] @ y[:-1] + x[-1] * y[0] - x[0] * y[-1]
    return 0.5 * float(cross)


def polygon_area(poly: npt.ArrayLike) -> float:
    """Unsigned area of ``poly`` ``(P, 2)``."""
    return abs(signed_area(poly))


def merge_rings(rings: list[F64]) -> F64:
    """One ring ``(P, 2)`` that traces every ring of ``rings`` (the parts of one object): each
    part, turned to the first's winding, is entered from the point of the path so far nearest to
    it, walked round and left back to that point. Each bridge is walked there and back, so the
    ring's area and fill are the parts' own and its extent is theirs together (the authors'
    converter also joins an object's parts into one polygon; assumptions D4)."""
    path = np.asarray(rings[0], np.float64)
    sign = signed_area(path) >= 0
    for ring in rings[1:]:
        part = np.asarray(ring, np.float64)
        if (signed_area(part) >= 0) != sign:
            part = part[::-1]
        gap = ((path[:, None, :] - part[None, :, :]) ** 2).sum(-1)
        i, j = np.unravel_index(int(gap.argmin()), gap.shape)
        walk = np.concatenate([part[j:], part[: j + 1]])  # round the part, back to its entry
        path = np.concatenate([path[: i + 1], walk, path[i:]])
    return path


def clip_polygon(subject: npt.ArrayLike, clip: npt.ArrayLike) -> F64:
    """The part of ``subject`` ``(P, 2)`` inside the convex polygon ``clip`` ``(Q, 2)``.

    Returns ``(R, 2)`` float64, ``R = 0`` when they do not overlap. Either winding order works.
    """
    out = np.asarray(subject, np.float64)
    c = np.asarray(clip, np.float64)
    if signed_area(c) < 0:
        c = c[::-1]
    for i in range(c.shape[0]):
        if out.shape[0] == 0:
            break
        a, b = c[i], c[(i + 1) % c.shape[0]]
        edge = b - a
        # side > 0: left of the edge, i.e. inside a counter-clockwise clip polygon.
        side = edge[0] * (out[:, 1] - a[1]) - edge[1] * (out[:, 0] - a[0])
        back = np.arange(out.shape[0]) - 1  # index of each vertex's predecessor (-1 wraps)
        prev, prev_side = out[back], side[back]
        points: list[F64] = []
        for j in range(out.shape[0]):
            cur_in, prev_in = side[j] >= 0, prev_side[j] >= 0
            if cur_in != prev_in:
                t = prev_side[j] / (prev_side[j] - side[j])
                points.append(prev[j] + t * (out[j] - prev[j]))
            if cur_in:
                points.append(out[j])
        out = np.array(points, np.float64).reshape(-1, 2)
    return out


def clip_to_rect(subject: npt.ArrayLike, width: float, height: float) -> F64:
    """``subject`` ``(P, 2)`` clipped to the canvas ``[0, width] x [0, height]``; ``(R, 2)``."""
    rect = np.array([[0, 0], [width, 0], [width, height], [0, height]], np.float64)
    return clip_polygon(subject, rect)


def convex_iou(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """Intersection over union of two convex polygons ``(P, 2)`` and ``(Q, 2)``."""
    inter = polygon_area(clip_polygon(a, b))
    union = polygon_area(a) + polygon_area(b) - inter
    return inter / union if union > 0 else 0.0
