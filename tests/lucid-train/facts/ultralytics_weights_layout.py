"""Writes ultralytics_weights_layout.json: what the authors' released ``yolo26n*.pt`` hold.

Run with Ultralytics 8.4.190 installed (not a lucid dependency), offline, from this folder:

    YOLO_OFFLINE=1 python ultralytics_weights_layout.py ultralytics_weights_layout.json

For each task it builds ``yolo26n{,-seg,-pose,-obb}.yaml`` (no weights, 80 classes, 17x3
keypoints), writes it as their trainer does (the EMA in fp16 under ``"ema"``, then
``strip_optimizer``, which moves it to ``"model"``), and records facts only: the state-dict keys
and shapes in order (``"key d0,d1,..."``; every tensor is fp16 but the BatchNorm counters,
int64), the model's class and attributes lucid reads (``task``, ``yaml`` scale,
``nc``, ``kpt_shape``), the checkpoint's top-level keys, and every global the pickle names.
`test_finetune_weights.py` writes files of that layout from lucid's own modules and holds the
key mapping and the restricted reader against these facts.
"""

import json
import pickletools
import sys
import tempfile
import zipfile
from copy import deepcopy
from pathlib import Path

import numpy as np
import torch
from ultralytics import YOLO, __version__
from ultralytics.utils.torch_utils import strip_optimizer

SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}


def pickle_globals(path: Path) -> list[str]:
    """``module.name`` of every GLOBAL / STACK_GLOBAL in the archive's data.pkl (read, not run)."""
    with zipfile.ZipFile(path) as z:
        data = z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
    found, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            found.add(arg.replace(" ", "."))
        elif isinstance(arg, str):
            strings.append(arg)
        if op.name == "STACK_GLOBAL":
            found.add(f"{strings[-2]}.{strings[-1]}")
    return sorted(found)


def facts(task: str, folder: Path) -> dict:
    model = YOLO(f"yolo26n{SUFFIX[task]}.yaml").model
    ckpt = {
        "date": "2026-01-01T00:00:00",
        "version": __version__,
        "epoch": 1,
        "best_fitness": np.float64(0.5),
        "model": None,
        "ema": deepcopy(model).half(),
        "updates": 1,
        "optimizer": None,
        "train_args": dict(model.args) if isinstance(model.args, dict) else vars(model.args),
        "train_metrics": {"metrics/mAP50-95(B)": np.float64(0.1)},
        "train_results": None,
    }
    path = folder / f"{task}.pt"
    torch.save(ckpt, path)
    strip_optimizer(path)
    saved = torch.load(path, weights_only=False)
    net = saved["model"]
    return {
        "class": f"{type(net).__module__}.{type(net).__qualname__}",
        "task": net.task,
        "scale": net.yaml.get("scale"),
        "nc": net.yaml["nc"],
        "kpt_shape": net.yaml.get("kpt_shape"),
        "checkpoint_keys": sorted(saved),
        "globals": pickle_globals(path),
        "dtypes": sorted({str(v.dtype) for v in net.state_dict().values()}),
        "state_dict": [f"{k} {','.join(map(str, v.shape))}" for k, v in net.state_dict().items()],
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = {
            "command": "YOLO_OFFLINE=1 python ultralytics_weights_layout.py OUT.json",
            "ultralytics": __version__,
            "models": {f"yolo26n{SUFFIX[t]}": facts(t, Path(tmp)) for t in SUFFIX},
        }
    Path(sys.argv[1]).write_text(json.dumps(out, indent=0) + "\n")


if __name__ == "__main__":
    main()
