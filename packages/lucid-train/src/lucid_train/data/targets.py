"""`Targets`: the annotations of one image, strict and validated on construction.

Coordinates are continuous pixels: the image covers ``[0, W] x [0, H]`` and pixel ``(row i,
column j)`` has its centre at ``(j + 0.5, i + 0.5)``, the COCO convention. Every field is a numpy
array so the label work in loader workers stays cheap; the batch packer turns them into tensors.

Fields other than ``boxes``/``labels``/``difficult`` are optional per dataset: ``None`` means the
dataset has no such geometry, an array (or tuple) means one row per instance. A field is never
half-filled: ``polygons`` has N rings or is ``None``, and so on.

Rotated boxes use the long-edge convention (``w >= h``, ``theta`` in ``[-pi/2, pi/2)`` radians,
the angle of the long side from +x towards +y, image y pointing down); see
`lucid_train.data.rotated` and assumptions.md D3.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
B1 = npt.NDArray[np.bool_]


class TargetsError(ValueError):
    """A `Targets` field has the wrong shape, dtype or value."""


def _check(array: Any, name: str, dtype: type, shape: tuple[int | None, ...]) -> None:
    if not isinstance(array, np.ndarray):
        raise TargetsError(f"{name}: expected a numpy array, got {type(array).__name__}")
    if array.dtype != dtype:
        raise TargetsError(f"{name}: expected dtype {np.dtype(dtype)}, got {array.dtype}")
    if array.ndim != len(shape) or any(
        want is not None and got != want for got, want in zip(array.shape, shape, strict=True)
    ):
        spec = "(" + ", ".join("?" if s is None else str(s) for s in shape) + ")"
        raise TargetsError(f"{name}: expected shape {spec}, got {tuple(array.shape)}")


def _check_finite(array: npt.NDArray[Any], name: str) -> None:
    if array.size and not np.isfinite(array).all():
        raise TargetsError(f"{name}: holds non-finite values")


@dataclass(frozen=True, eq=False)
class Targets:
    """Annotations of one image.

    Attributes:
        boxes: ``(N, 4)`` float32 xyxy pixels, ``x1 <= x2``, ``y1 <= y2``. For rotated or
            polygon instances this is the axis-aligned envelope of that geometry.
        labels: ``(N,)`` int64 contiguous class labels ``0 .. C-1``.
        difficult: ``(N,)`` bool, True for instances a protocol ignores (DOTA ``difficult``,
            tiles that cut an object, assumptions.md D7). Defaults to all False.
        polygons: ``None`` or N rings, each ``(P_i, 2)`` float32 xy pixels with ``P_i >= 3``.
        rboxes: ``None`` or ``(N, 5)`` float32 ``(cx, cy, w, h, theta)``, long-edge convention.
        keypoints: ``None`` or ``(N, K, 2)`` float32 xy pixels.
        keypoint_vis: ``None`` or ``(N, K)`` uint8 COCO visibility: 0 unlabelled, 1 labelled but
            occluded, 2 visible. Present exactly when ``keypoints`` is.
    """

    boxes: F32
    labels: I64
    difficult: B1 = field(default_factory=lambda: np.zeros(0, np.bool_))
    polygons: tuple[F32, ...] | None = None
    rboxes: F32 | None = None
    keypoints: F32 | None = None
    keypoint_vis: U8 | None = None

    def __post_init__(self) -> None:
        _check(self.boxes, "boxes", np.float32, (None, 4))
        n = self.boxes.shape[0]
        _check_finite(self.boxes, "boxes")
        if (
            n
            and (
                (self.boxes[:, 2] < self.boxes[:, 0]) | (self.boxes[:, 3] < self.boxes[:, 1])
            ).any()
        ):
            bad = int(
                np.flatnonzero(
                    (self.boxes[:, 2] < self.boxes[:, 0]) | (self.boxes[:, 3] < self.boxes[:, 1])
                )[0]
            )
            raise TargetsError(
                f"boxes: expected x1 <= x2 and y1 <= y2, got {self.boxes[bad].tolist()} "
                f"at row {bad}"
            )
        _check(self.labels, "labels", np.int64, (n,))
        if n and self.labels.min() < 0:
            raise TargetsError(f"labels: expected >= 0, got {int(self.labels.min())}")
        if self.difficult.shape == (0,) and n:
            object.__setattr__(self, "difficult", np.zeros(n, np.bool_))
        _check(self.difficult, "difficult", np.bool_, (n,))
        if self.polygons is not None:
            if not isinstance(self.polygons, tuple) or len(self.polygons) != n:
                raise TargetsError(
                    f"polygons: expected a tuple of {n} rings, got "
                    f"{type(self.polygons).__name__} of {len(self.polygons)}"
                )
            for i, ring in enumerate(self.polygons):
                _check(ring, f"polygons[{i}]", np.float32, (None, 2))
                if ring.shape[0] < 3:
                    raise TargetsError(
                        f"polygons[{i}]: expected at least 3 points, got {ring.shape[0]}"
                    )
                _check_finite(ring, f"polygons[{i}]")
        if self.rboxes is not None:
            _check(self.rboxes, "rboxes", np.float32, (n, 5))
            _check_finite(self.rboxes, "rboxes")
            if n and (self.rboxes[:, 2:4] < 0).any():
                raise TargetsError("rboxes: expected w >= 0 and h >= 0")
        if (self.keypoints is None) != (self.keypoint_vis is None):
            raise TargetsError("keypoints and keypoint_vis: give both or neither")
        if self.keypoints is not None and self.keypoint_vis is not None:
            _check(self.keypoints, "keypoints", np.float32, (n, None, 2))
            _check_finite(self.keypoints, "keypoints")
            _check(self.keypoint_vis, "keypoint_vis", np.uint8, self.keypoints.shape[:2])
            if self.keypoint_vis.size and self.keypoint_vis.max() > 2:
                raise TargetsError(
                    f"keypoint_vis: expected 0, 1 or 2, got {int(self.keypoint_vis.max())}"
                )

    def __len__(self) -> int:
        return int(self.boxes.shape[0])

    @property
    def num_keypoints(self) -> int:
        """K, or 0 for a dataset without keypoints."""
        return 0 if self.keypoints is None else int(self.keypoints.shape[1])

    @classmethod
    def empty(
        cls, *, polygons: bool = False, rboxes: bool = False, num_keypoints: int | None = None
    ) -> Targets:
        """Zero instances, with the optional fields a dataset of that kind carries."""
        k = num_keypoints
        return cls(
            boxes=np.zeros((0, 4), np.float32),
            labels=np.zeros(0, np.int64),
            polygons=() if polygons else None,
            rboxes=np.zeros((0, 5), np.float32) if rboxes else None,
            keypoints=None if k is None else np.zeros((0, k, 2), np.float32),
            keypoint_vis=None if k is None else np.zeros((0, k), np.uint8),
        )

    def like_empty(self) -> Targets:
        """Zero instances with this record's optional fields (and keypoint count)."""
        return Targets.empty(
            polygons=self.polygons is not None,
            rboxes=self.rboxes is not None,
            num_keypoints=None if self.keypoints is None else self.num_keypoints,
        )

    def select(
        self, keep: npt.NDArray[np.bool_] | npt.NDArray[np.int64] | Sequence[int]
    ) -> Targets:
        """The instances chosen by a boolean mask ``(N,)`` or an index array, in that order."""
        idx = np.asarray(keep)
        if idx.dtype == np.bool_:
            if idx.shape != (len(self),):
                raise TargetsError(
                    f"select: expected a mask of shape ({len(self)},), got {idx.shape}"
                )
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64, copy=False)
        return Targets(
            boxes=self.boxes[idx],
            labels=self.labels[idx],
            difficult=self.difficult[idx],
            polygons=None if self.polygons is None else tuple(self.polygons[i] for i in idx),
            rboxes=None if self.rboxes is None else self.rboxes[idx],
            keypoints=None if self.keypoints is None else self.keypoints[idx],
            keypoint_vis=None if self.keypoint_vis is None else self.keypoint_vis[idx],
        )

    def replace(self, **changes: Any) -> Targets:
        """A copy with fields replaced (validated again)."""
        return replace(self, **changes)

    @staticmethod
    def concat(parts: Sequence[Targets]) -> Targets:
        """Instances of ``parts`` one after another; all parts must carry the same fields."""
        if not parts:
            raise TargetsError("concat: expected at least one Targets")
        first = parts[0]
        for p in parts[1:]:
            if (
                (p.polygons is None) != (first.polygons is None)
                or (p.rboxes is None) != (first.rboxes is None)
                or (p.keypoints is None) != (first.keypoints is None)
                or p.num_keypoints != first.num_keypoints
            ):
                raise TargetsError("concat: parts carry different optional fields")
        return Targets(
            boxes=np.concatenate([p.boxes for p in parts]),
            labels=np.concatenate([p.labels for p in parts]),
            difficult=np.concatenate([p.difficult for p in parts]),
            polygons=None
            if first.polygons is None
            else tuple(r for p in parts for r in p.polygons or ()),
            rboxes=None
            if first.rboxes is None
            else np.concatenate([p.rboxes for p in parts if p.rboxes is not None]),
            keypoints=None
            if first.keypoints is None
            else np.concatenate([p.keypoints for p in parts if p.keypoints is not None]),
            keypoint_vis=None
            if first.keypoint_vis is None
            else np.concatenate([p.keypoint_vis for p in parts if p.keypoint_vis is not None]),
        )

    def allclose(self, other: Targets, *, atol: float = 1e-4) -> bool:
        """Same fields, labels and flags, and coordinates within ``atol`` pixels."""

        def close(a: npt.NDArray[Any] | None, b: npt.NDArray[Any] | None) -> bool:
            if a is None or b is None:
                return a is None and b is None
            return a.shape == b.shape and bool(np.allclose(a, b, atol=atol, rtol=0))

        if len(self) != len(other) or not np.array_equal(self.labels, other.labels):
            return False
        if not np.array_equal(self.difficult, other.difficult):
            return False
        if (self.polygons is None) != (other.polygons is None):
            return False
        if (
            self.polygons is not None
            and other.polygons is not None
            and not all(close(a, b) for a, b in zip(self.polygons, other.polygons, strict=True))
        ):
            return False
        if (self.keypoint_vis is None) != (other.keypoint_vis is None):
            return False
        if (
            self.keypoint_vis is not None
            and other.keypoint_vis is not None
            and not np.array_equal(self.keypoint_vis, other.keypoint_vis)
        ):
            return False
        return (
            close(self.boxes, other.boxes)
            and close(self.rboxes, other.rboxes)
            and close(self.keypoints, other.keypoints)
        )
