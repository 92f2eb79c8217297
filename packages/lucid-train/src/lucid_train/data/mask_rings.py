"""A COCO run-length mask as polygon rings: the outer boundary of each of its parts.

The segment pipeline carries polygons (they follow every warp exactly), so a mask given as RLE
(``{"size": [h, w], "counts": ...}``, compressed or not) is traced once, at load: every pixel
edge between the mask and the rest is a unit step with the mask on its right, the steps are
chained into closed loops, and each loop that winds the outer way (not a hole) is one ring,
its straight runs reduced to their ends. A ring runs along pixel edges, as an annotator's polygon
round the part would: it encloses exactly the part's pixels and spans the mask's own extent
(COCO's ``bbox`` of it), and the training masks fill it as they fill any polygon (the authors'
raster, `lucid_train.data.masks.fill_ring`, also takes the row and column on its far edges).
The authors' converter traces through the boundary pixels' indices instead, so their box of
such a part is a pixel narrower and shorter than its ``bbox``. Holes are filled, as the authors'
outer contours fill them (assumptions D4).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from lucid_train.data.polygons import signed_area

__all__ = ["RleError", "rle_has_area", "rle_rings"]

F64 = npt.NDArray[np.float64]


class RleError(ValueError):
    """The segmentation is not a run-length mask of its image (the message says why)."""


def _counts(text: str) -> list[int]:
    """The run lengths of COCO's compressed RLE string: each count in 5-bit groups, low first,
    as characters from ``0``; bit 5 says another group follows, bit 4 of the last is the sign;
    from the fourth count on, each is stored as its difference to the count two before."""
    counts: list[int] = []
    p = 0
    while p < len(text):
        value, shift, more = 0, 0, True
        while more:
            if p >= len(text):
                raise RleError("its 'counts' string ends inside a count")
            c = ord(text[p]) - 48
            if not 0 <= c < 64 or shift > 60:
                raise RleError("its 'counts' string is not COCO's compressed RLE")
            value |= (c & 0x1F) << shift
            more = bool(c & 0x20)
            p, shift = p + 1, shift + 5
            if not more and c & 0x10:
                value -= 1 << shift
        counts.append(value + counts[-2] if len(counts) > 2 else value)
    return counts


def _decode(seg: dict[str, Any], height: int, width: int) -> npt.NDArray[np.bool_]:
    """The mask of ``seg``, checked before it is expanded (pycocotools' decoder trusts the
    counts to fit the image; a file's counts are not trusted here)."""
    size, counts = seg.get("size"), seg.get("counts")
    if not (isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) for v in size)):
        raise RleError("its 'size' is not [height, width]")
    if list(size) != [height, width]:
        raise RleError(f"its size {size} is not its image's [{height}, {width}]")
    if isinstance(counts, str):
        counts = _counts(counts)
    elif not (isinstance(counts, list) and all(type(c) is int for c in counts)):
        raise RleError("its 'counts' is neither a string nor a list of run lengths")
    if any(c < 0 for c in counts) or sum(counts) != height * width:
        raise RleError(f"its run lengths do not cover the {height} x {width} image")
    runs = np.asarray(counts, np.int64)
    flat = np.repeat(np.arange(len(runs)) % 2 == 1, runs)  # zeros first, column by column
    return flat.reshape(width, height).T


def _steps(mask: npt.NDArray[np.bool_]) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """Every pixel edge between ``mask`` and the rest as a unit step between corner points
    ``(x, y)`` (y down), the mask on its right: outer boundaries run clockwise on screen."""
    m = np.pad(mask, 1)  # corner (x, y) of the padded grid is (x - 1, y - 1) of the mask's
    steps: dict[tuple[int, int], list[tuple[int, int]]] = {}

    def add(hits: npt.NDArray[np.bool_], start: tuple[int, int], end: tuple[int, int]) -> None:
        for p, q in zip(*np.nonzero(hits), strict=True):
            x, y = int(q), int(p)
            steps.setdefault((x + start[0], y + start[1]), []).append((x + end[0], y + end[1]))

    above, below = m[:-1, :], m[1:, :]  # pixel rows p and p + 1: the edge on corner row p + 1
    add(below & ~above, (0, 1), (1, 1))  # the mask below: rightwards
    add(above & ~below, (1, 1), (0, 1))  # the mask above: leftwards
    left, right = m[:, :-1], m[:, 1:]  # pixel columns q and q + 1: the edge on corner column q + 1
    add(left & ~right, (1, 0), (1, 1))  # the mask on the left: downwards
    add(right & ~left, (1, 1), (1, 0))  # the mask on the right: upwards
    return steps


def _loops(mask: npt.NDArray[np.bool_]) -> list[npt.NDArray[np.int64]]:
    """The closed boundary loops of ``mask`` as corner points of the mask's own grid."""
    steps = _steps(mask)
    loops = []
    while steps:
        start = here = next(iter(steps))
        loop, came = [start], (0, 0)
        while True:
            outs = steps[here]
            # Where two parts touch at a corner, turn right: each part closes on itself.
            right = (here[0] - came[1], here[1] + came[0])
            nxt = right if came != (0, 0) and right in outs else outs[0]
            outs.remove(nxt)
            if not outs:
                del steps[here]
            came, here = (nxt[0] - here[0], nxt[1] - here[1]), nxt
            if here == start:
                break
            loop.append(here)
        loops.append(np.asarray(loop, np.int64) - 1)  # undo the pad
    return loops


def _corners(loop: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``loop`` without the points inside straight runs."""
    d1, d2 = loop - np.roll(loop, 1, 0), np.roll(loop, -1, 0) - loop
    turn: npt.NDArray[np.bool_] = d1[:, 0] * d2[:, 1] - d1[:, 1] * d2[:, 0] != 0
    return loop[turn]


def rle_has_area(seg: dict[str, Any], height: int, width: int) -> bool:
    """Whether ``seg`` reads as a run-length mask of a ``height`` x ``width`` image with at least
    one pixel set: the RLE masks a reader trains as they are (`rle_rings`); others train their
    box."""
    try:
        return bool(_decode(seg, height, width).any())
    except RleError:
        return False


def rle_rings(seg: dict[str, Any], height: int, width: int) -> list[F64]:
    """The outer rings ``(P, 2)`` (pixel-edge coordinates of the image) of the RLE mask
    ``seg``, one per part, largest first; empty for an empty mask.

    Raises:
        RleError: ``seg`` is not a run-length mask of a ``height`` x ``width`` image.
    """
    mask = _decode(seg, height, width)
    ys, xs = np.nonzero(mask)
    if not len(xs):
        return []
    y0, x0 = int(ys.min()), int(xs.min())
    crop = mask[y0 : int(ys.max()) + 1, x0 : int(xs.max()) + 1]
    rings = []
    for loop in _loops(crop):
        ring = _corners(loop).astype(np.float64) + np.array([x0, y0], np.float64)
        area = signed_area(ring)
        if area > 0:  # the outer way round (y down); holes wind the other way
            rings.append((area, ring))
    return [ring for _, ring in sorted(rings, key=lambda ar: -ar[0])]
