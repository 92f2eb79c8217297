"""An annotation's COCO ``segmentation`` as the one ring a segment or obb target carries.

Segment: every polygon ring, or the outer boundary of every part of a run-length mask
(`lucid_train.data.mask_rings`), joined into one ring (`lucid_train.data.polygons.merge_rings`);
an object without a usable outline keeps its box as its ring, as the authors' converter writes a
box-shaped polygon for it. Obb: the first ring, exactly 4 points. Every substitution and skip is
counted in the load report (assumptions D4).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lucid_train.data.formats.input_checks import number_list
from lucid_train.data.mask_rings import RleError, rle_rings
from lucid_train.data.polygons import merge_rings
from lucid_train.data.records import LoadReport, Task

__all__ = ["annotation_ring", "is_ring_length"]


def is_ring_length(values: int) -> bool:
    """Whether a flat polygon of ``values`` numbers is a ring: whole points, at least 3."""
    return values % 2 == 0 and values >= 6


def annotation_ring(
    seg: Any, task: Task, box: np.ndarray, size: tuple[int, int], aid: str, report: LoadReport
) -> np.ndarray | None:
    """The one ring ``(P, 2)`` of an annotation's ``segmentation``, or None with the skip counted.

    Segment: every polygon ring, or the outer boundary of every part of an RLE mask, joined into
    one (`merge_rings`); without a usable polygon, its (clipped) ``box`` as the ring, counted, as
    the authors' converter writes a box-shaped polygon (the object still trains its box; assumptions
    D4). Obb: the first ring, exactly 4 points. ``size`` is the image's ``(width, height)``.
    """
    segment = task == "segment"

    def boxed(reason: str, where: str = aid) -> np.ndarray:
        report.skip(f"{reason}: kept, its box as the mask", where)
        x0, y0, x1, y1 = (float(v) for v in box)
        return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)

    if segment and isinstance(seg, dict):
        try:
            found = rle_rings(seg, size[1], size[0])
        except RleError as err:
            return boxed("RLE mask that does not read as its image's", f"{aid} ({err})")
        if not found:
            return boxed("empty RLE mask")
        return found[0] if len(found) == 1 else merge_rings(found)
    if not isinstance(seg, list) or not seg:
        if segment:
            return boxed("no segmentation")
        report.skip("no polygon segmentation (missing, empty or RLE)", aid)
        return None
    # segment: every ring is a part of the object, joined into one (assumptions D4)
    parts = [number_list(r, aid, "'segmentation' ring") for r in (seg if segment else seg[:1])]
    good = [r.reshape(-1, 2) for r in parts if is_ring_length(r.size)]
    if not good:
        reason = "an odd count of coordinates" if parts[0].size % 2 else "fewer than 3 points"
        if segment:
            return boxed(f"polygon with {reason}")
        report.skip(f"polygon with {reason}", aid)
        return None
    if len(good) < len(parts):
        report.skip("polygon part with an odd count or < 3 points (the rest kept)", aid)
    ring = good[0] if len(good) == 1 else merge_rings(good)
    if task == "obb" and ring.shape[0] != 4:
        report.skip("rotated ring without exactly 4 points", aid)
        return None
    return ring
