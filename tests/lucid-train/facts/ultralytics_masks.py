"""Writes ultralytics_masks.json: the authors' stride-4 training mask targets for fixed polygons.

Run with Ultralytics 8.4.190 installed (not a lucid dependency), from this folder:

    python ultralytics_masks.py > ultralytics_masks.json

Each case holds the polygons (canvas pixels, canvas side ``size``) and the cells the authors'
training path turns on: the polygons resampled to 1,000 points as their ``YOLODataset`` does at
load (``ultralytics.utils.ops.resample_segments``), then
``ultralytics.data.utils.polygons2masks_overlap(..., downsample_ratio=4)``, as flat indices per
instance (in the input order). `test_data_masks.py` holds ours against them.
"""

import json
import math

import numpy as np
from ultralytics.data.utils import polygons2masks_overlap
from ultralytics.utils.ops import resample_segments


def circle(cx: float, cy: float, r: float, n: int = 32) -> np.ndarray:
    a = np.arange(n) * 2 * math.pi / n
    return np.stack([cx + r * np.cos(a), cy + r * np.sin(a)], -1)


def cases() -> list[tuple[str, int, list[np.ndarray]]]:
    out = [
        ("circle r6", 64, [circle(21.3, 30.7, 6.0)]),
        ("circle r10", 64, [circle(40.2, 22.9, 10.0)]),
        ("triangle", 64, [np.array([[5.5, 50.2], [30.1, 60.7], [12.9, 38.4]])]),
        ("thin bar", 64, [np.array([[33.0, 40.0], [60.0, 52.0], [58.4, 55.6], [31.4, 43.6]])]),
        ("overlap", 64, [circle(30, 30, 16), circle(36, 30, 6)]),
    ]
    rng = np.random.default_rng(1)
    for k in range(60):
        n = int(rng.choice([3, 4, 5, 8, 32]))
        r = float(np.exp(rng.uniform(np.log(3), np.log(60))))
        cx, cy = rng.uniform(-10, 170, 2)
        a = np.sort(rng.uniform(0, 2 * math.pi, n)) if n < 32 else np.arange(n) * 2 * math.pi / n
        rr = r * (rng.uniform(0.5, 1.0, n) if n < 32 else np.ones(n))
        ring = np.stack([cx + rr * np.cos(a), cy + rr * np.sin(a) * rng.uniform(0.2, 1)], -1)
        out.append((f"random {k}", 160, [ring]))
    return out


def main() -> None:
    doc = []
    for name, size, polys in cases():
        dense = resample_segments([p.astype(np.float32) for p in polys], n=1000)
        masks, order = polygons2masks_overlap((size, size), [p.reshape(-1) for p in dense], 4)
        cells = [np.flatnonzero(masks.reshape(-1) == k + 1) for k in range(len(polys))]
        by_input = [[] for _ in polys]
        for k, j in enumerate(order):  # value k + 1 is the k-th polygon by descending area
            by_input[int(j)] = cells[k].tolist()
        doc.append(
            {
                "name": name,
                "size": size,
                "polygons": [p.round(4).tolist() for p in polys],
                "cells": by_input,
            }
        )
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
