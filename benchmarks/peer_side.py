"""The Ultralytics side, run in the peer's interpreter (``peer_detect.py --peer-half`` /
``--peer-validate``): its training and its validator on both decode paths. Imports nothing of
lucid."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from peer_common import MODEL_SUFFIX, offline_authors_trainer


def _peer_extra(task: str, metrics: Any) -> dict[str, float]:
    """Ultralytics' own mask / pose mAP50-95 beside its box one."""
    if task == "segment":
        return {"mask_ultralytics_mAP50-95": float(metrics.seg.map)}
    if task == "pose":
        return {"pose_ultralytics_mAP50-95": float(metrics.pose.map)}
    return {}


def _peer_vals(
    weights: Path, spec: dict[str, Any], common: dict[str, Any], task: str, rect_too: bool
) -> dict[str, Any]:
    """The peer's validator on ``weights``, both decode paths; with ``rect_too`` also its
    rectangular batches (``e2e_rect``, ``nms_rect``)."""
    from ultralytics import YOLO

    out: dict[str, Any] = {}
    # Scored: square letterboxed canvases, as ours validates (assumptions D19). Also kept, to
    # measure what the inputs change: the method's default, aspect-sorted rectangular batches.
    for key, nms, rect in (
        ("e2e", False, False),
        ("nms", True, False),
        *((("e2e_rect", False, True), ("nms_rect", True, True)) if rect_too else ()),
    ):
        val_args = {
            **common,
            "data": spec["data"],
            "nms": nms,
            "rect": rect,
            "save_json": True,
            "plots": False,
            "workers": spec["workers"],
            "project": spec["project"],
            "name": f"val-{key}",
            "exist_ok": True,
        }
        start = time.perf_counter()
        val_model = YOLO(str(weights))
        seen: dict[str, Any] = {}
        # which head the validator ran: its ``end2end`` (set from the backend) after the val
        val_model.add_callback(
            "on_val_end", lambda v, seen=seen: seen.update(end2end=bool(v.end2end))
        )
        metrics = val_model.val(**val_args)
        out[key] = {
            "ultralytics_mAP50-95": float(metrics.box.map),
            "ultralytics_mAP50": float(metrics.box.map50),
            **_peer_extra(task, metrics),
            "validator_end2end": seen.get("end2end"),
            "predictions": str(Path(metrics.save_dir) / "predictions.json"),
            "val_wall_s": round(time.perf_counter() - start, 1),
            "val_call": f"YOLO({str(weights)!r}).val(**{val_args!r})",
        }
    return out


PEER_MODEL_CLASS = {
    "detect": "DetectionModel",
    "segment": "SegmentationModel",
    "pose": "PoseModel",
    "obb": "OBBModel",
}


def peer_validate_half(spec_path: Path) -> None:
    """In the peer's interpreter: its model class for the task, built from its yaml with our
    weights under its names (strictly: every tensor matched), validated by its validator."""
    spec = json.loads(spec_path.read_text())
    import torch
    from ultralytics.nn import tasks

    task = spec["task"]
    kw = {"data_kpt_shape": tuple(spec["kpt_shape"])} if spec.get("kpt_shape") else {}
    model_class = getattr(tasks, PEER_MODEL_CLASS[task])
    model = model_class(f"yolo26n{MODEL_SUFFIX[task]}.yaml", nc=spec["nc"], verbose=False, **kw)
    model.load_state_dict(torch.load(spec["state"]), strict=True)
    Path(spec["project"]).mkdir(parents=True, exist_ok=True)
    weights = Path(spec["project"]) / "lucid-weights.pt"
    train_args = {"task": task, "imgsz": spec["imgsz"]}
    torch.save({"model": model.half(), "train_args": train_args}, weights)
    common = {"imgsz": spec["imgsz"], "batch": spec["batch"], "device": spec["device"]}
    out = _peer_vals(weights, spec, common, task, rect_too=False)
    Path(spec["result"]).write_text(json.dumps(out, indent=1))


def peer_half(spec_path: Path) -> None:
    """The Ultralytics side, in its own process (the environment is set by `run_peer`)."""
    spec = json.loads(spec_path.read_text())
    import torch
    import ultralytics
    from ultralytics import YOLO, settings

    settings.update(
        {"sync": False, "clearml": False, "comet": False, "dvc": False, "mlflow": False}
    )
    on_cuda = spec["device"] != "cpu"
    if on_cuda:  # the AMP check would fetch yolo26n.pt; answer it (AMP stays on)
        offline_authors_trainer()
    common = {"imgsz": spec["imgsz"], "batch": spec["batch"], "device": spec["device"]}
    train_args = {
        **common,
        "data": spec["data"],
        "epochs": spec["epochs"],
        "workers": spec["workers"],
        "amp": on_cuda,  # on the CPU Ultralytics turns AMP off anyway
        "pretrained": False,
        "deterministic": False,
        "plots": False,
        "seed": int(spec.get("seed", 0)),
        "project": spec["project"],
        "name": "train",
        "exist_ok": True,
    }
    out: dict[str, Any] = {
        "versions": {"ultralytics": ultralytics.__version__, "torch": torch.__version__},
        "train_call": f"YOLO('yolo26n.yaml').train(**{train_args!r})",
    }
    task = spec.get("task", "detect")
    model = YOLO(f"yolo26n{MODEL_SUFFIX[task]}.yaml")
    start = time.perf_counter()
    model.train(**train_args)
    out["train_wall_s"] = round(time.perf_counter() - start, 1)
    trainer = model.trainer
    out["train_time_start_unix"] = float(getattr(trainer, "train_time_start", 0.0)) or None
    save_dir = Path(trainer.save_dir)
    out["optimizer"] = type(trainer.optimizer).__name__ if trainer.optimizer else None
    out["amp"] = bool(trainer.amp)
    out["accumulate"] = int(getattr(trainer, "accumulate", 0))
    out["train_final_val"] = {k: float(v) for k, v in (trainer.metrics or {}).items()}
    last = save_dir / "weights" / "last.pt"
    out["weights"] = str(last)
    csv_path = save_dir / "results.csv"
    if csv_path.is_file():
        shutil.copy(csv_path, Path(spec["result"]).parent / "peer-results.csv")
    # the training's facts first: a side stopped by its timeout in the validations below keeps
    # its clock and per-epoch curve (2026-12-06 16:13 lost both that way)
    Path(spec["result"]).write_text(json.dumps(out, indent=1))
    out.update(_peer_vals(last, spec, common, task, rect_too=True))
    Path(spec["result"]).write_text(json.dumps(out, indent=1))
