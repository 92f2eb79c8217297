"""Count the authors' YOLO26 builds (Ultralytics 8.4) the way lucid_models.counts counts ours.

Not a test and not part of lucid: it needs ``ultralytics``, which lucid does not depend on. Run it
in a scratch environment, offline, from the repository root::

    python3 -m venv /tmp/ulvenv && /tmp/ulvenv/bin/pip install ultralytics
    YOLO_OFFLINE=1 YOLO_CONFIG_DIR=/tmp/ulcfg MPLCONFIGDIR=/tmp/ulcfg/mpl \\
        /tmp/ulvenv/bin/python tests/lucid-models/peer/count_ultralytics.py \\
        --write goldens/models/ultralytics-8.4-counts.json

Models are built from the ``yolo26{n,s,m,l,x}{,-seg,-pose,-obb}.yaml`` configs (no weights) at
80 classes and 17x3 keypoints. ``params`` counts every parameter, ``params_without_flow`` drops
the pose RLE flow (which lucid keeps in the loss); ``fused_params`` and ``fused_flops`` are after
``fuse()`` with the one-to-one branch kept; FLOPs are FlopCounterMode totals for
one 1x3x640x640 image, training mode before fusing, eval mode after.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}


def _flops(model: Any, training: bool) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model.train(training)
    # Real tensors: the eval forward's top-k post-processing is data-dependent.
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.zeros(1, 3, 640, 640))
    return int(counter.get_total_flops())


def count(scale: str, task: str) -> dict[str, int]:
    """Counts of ``yolo26<scale><suffix>.yaml``."""
    from ultralytics import YOLO

    model = YOLO(f"yolo26{scale}{SUFFIX[task]}.yaml").model
    params = sum(p.numel() for p in model.parameters())
    head = model.model[-1]
    flow = getattr(head, "flow_model", None)
    flow_params = 0 if flow is None else sum(p.numel() for p in flow.parameters())
    row = {
        "params": params,
        "params_without_flow": params - flow_params,
        "flops": _flops(model, training=True),
    }
    model.end2end = True  # keep the one-to-one branch when fusing
    model.eval()
    model.fuse(verbose=False)
    row["fused_params"] = sum(p.numel() for p in model.parameters())
    row["fused_flops"] = _flops(model, training=False)
    return row


def main() -> None:
    """Count all 20 builds and write them as JSON."""
    import ultralytics

    parser = argparse.ArgumentParser()
    parser.add_argument("--write", type=Path, required=True)
    args = parser.parse_args()
    models = {f"yolo26{scale}-{task}": count(scale, task) for task in SUFFIX for scale in "nsmlx"}
    doc = {
        "command": (
            "YOLO_OFFLINE=1 python tests/lucid-models/peer/count_ultralytics.py "
            "--write goldens/models/ultralytics-8.4-counts.json"
        ),
        "ultralytics": ultralytics.__version__,
        "models": models,
    }
    args.write.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
