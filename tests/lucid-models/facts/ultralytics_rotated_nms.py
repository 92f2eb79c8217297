"""Writes ultralytics_rotated_nms.json: what the authors' NMS keeps of rotated candidates.

Run with Ultralytics 8.4.190 installed (not a lucid dependency), from this folder:

    python ultralytics_rotated_nms.py > ultralytics_rotated_nms.json

Each case holds ``N`` anchors' rotated boxes ``(cx, cy, w, h, theta)`` in pixels and their class
scores, crowded so that many overlap, and the ``(anchor, class)`` pairs that
``ultralytics.utils.nms.non_max_suppression(..., multi_label=True, rotated=True)`` keeps, in its
output order, at the obb validator's settings (conf 0.01, IoU 0.7, 300 kept).
`test_nms.py::test_rotated_fast_nms_keeps_the_authors_pairs` holds ours against them.
"""

import json

import torch
from ultralytics.utils.nms import non_max_suppression


def cases() -> list[dict]:
    out = []
    g = torch.Generator().manual_seed(0)
    for n, classes, spread in ((60, 2, 40.0), (400, 3, 120.0), (200, 1, 30.0)):
        centres = torch.rand(n, 2, generator=g) * spread
        sizes = torch.rand(n, 2, generator=g) * 30 + 3
        angles = (torch.rand(n, 1, generator=g) - 0.5) * 3.0
        scores = torch.rand(n, classes, generator=g) ** 2
        pred = torch.cat([centres, sizes, scores, angles], dim=1).T[None]  # (1, 4 + nc + 1, N)
        kept, idx = non_max_suppression(
            pred.clone(),
            0.01,
            0.7,
            nc=classes,
            multi_label=True,
            max_det=300,
            rotated=True,
            return_idxs=True,
        )
        rows = kept[0]
        out.append(
            {
                "rboxes": torch.cat([centres, sizes, angles], dim=1).tolist(),
                "scores": scores.tolist(),
                "conf": 0.01,
                "iou": 0.7,
                "kept": [
                    [int(a), int(c)]
                    for a, c in zip(idx[0].tolist(), rows[:, 5].tolist(), strict=True)
                ],
            }
        )
    return out


if __name__ == "__main__":
    print(json.dumps({"ultralytics": "8.4.190", "cases": cases()}))
