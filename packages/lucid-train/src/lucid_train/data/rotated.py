"""Rotated boxes: the long-edge convention, corners, and fitting a box to four points.

A rotated box is ``(cx, cy, w, h, theta)``: centre, long side ``w >= h``, and ``theta`` in
``[-pi/2, pi/2)`` radians, the angle of the long side measured from +x towards +y (image y points
down, so positive angles turn clockwise on screen). assumptions.md D3 says why this convention.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


def canonical_rboxes(rboxes: npt.ArrayLike) -> F32:
    """``(N, 5)`` boxes in any ``(w, h, theta)`` form → the long-edge convention, float32."""
    rb = np.asarray(rboxes, np.float64).reshape(-1, 5).copy()
    swap = rb[:, 3] > rb[:, 2]
    rb[swap, 2], rb[swap, 3] = rb[swap, 3].copy(), rb[swap, 2].copy()
    rb[swap, 4] += math.pi / 2
    rb[:, 4] = np.mod(rb[:, 4] + math.pi / 2, math.pi) - math.pi / 2
    return rb.astype(np.float32)


def rbox_corners(rboxes: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(N, 5)`` rotated boxes → ``(N, 4, 2)`` float64 corners, in ring order."""
    rb = np.asarray(rboxes, np.float64).reshape(-1, 5)
    c, s = np.cos(rb[:, 4]), np.sin(rb[:, 4])
    half_w = np.stack([c, s], -1) * (rb[:, 2:3] / 2)  # (N, 2) along the long side
    half_h = np.stack([-s, c], -1) * (rb[:, 3:4] / 2)  # (N, 2) along the short side
    centre = rb[:, :2]
    return np.stack(
        [
            centre - half_w - half_h,
            centre + half_w - half_h,
            centre + half_w + half_h,
            centre - half_w + half_h,
        ],
        axis=1,
    )


def fit_rboxes(corners: npt.ArrayLike) -> F32:
    """Minimum-area rotated boxes around point sets ``(N, P, 2)`` → ``(N, 5)`` long-edge float32.

    A minimum-area rectangle has a side along an edge of the convex hull, and every hull edge is
    the direction of some pair of points, so trying all ``P (P - 1) / 2`` pair directions is exact.
    For a true rectangle it returns that rectangle.
    """
    pts = np.asarray(corners, np.float64)
    n, p = pts.shape[0], pts.shape[1]
    if n == 0:
        return np.zeros((0, 5), np.float32)
    i, j = np.triu_indices(p, 1)
    d = pts[:, j] - pts[:, i]  # (N, D, 2) candidate side directions
    norm = np.linalg.norm(d, axis=-1, keepdims=True)
    u = np.where(norm > 0, d / np.where(norm > 0, norm, 1), np.array([1.0, 0.0]))  # (N, D, 2)
    v = np.stack([-u[..., 1], u[..., 0]], -1)
    pu = np.einsum("npk,ndk->ndp", pts, u)  # (N, D, P) projections on each direction
    pv = np.einsum("npk,ndk->ndp", pts, v)
    w = pu.max(-1) - pu.min(-1)
    h = pv.max(-1) - pv.min(-1)
    best = np.argmin(w * h, axis=1)  # (N,)
    rows = np.arange(n)
    ub, vb = u[rows, best], v[rows, best]  # (N, 2)
    mu = (pu[rows, best].max(-1) + pu[rows, best].min(-1)) / 2
    mv = (pv[rows, best].max(-1) + pv[rows, best].min(-1)) / 2
    centre = ub * mu[:, None] + vb * mv[:, None]
    theta = np.arctan2(ub[:, 1], ub[:, 0])
    out = np.stack([centre[:, 0], centre[:, 1], w[rows, best], h[rows, best], theta], -1)
    return canonical_rboxes(out)


def rbox_envelopes(rboxes: npt.ArrayLike) -> F32:
    """``(N, 5)`` rotated boxes → ``(N, 4)`` float32 axis-aligned xyxy envelopes."""
    c = rbox_corners(rboxes)
    if c.shape[0] == 0:
        return np.zeros((0, 4), np.float32)
    return np.concatenate([c.min(1), c.max(1)], -1).astype(np.float32)
