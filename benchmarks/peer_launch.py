"""The peer's side driven from our process: its environment (offline, a font), its halves run in
its interpreter, its predictions re-scored by our scorer, and our weights through its validator."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from peer_common import PATHS, REPO, _child_env, _run_logged
from peer_ours import _checkpoint_of, validate_with_lucid
from peer_scoring import rescore, rescore_rotated


def _font_source(explicit: Path | None) -> Path | None:
    """A TTF to place as Arial.ttf: ``--font``, else ``.whl-peer/Arial.ttf``, else matplotlib's
    DejaVuSans (any TTF satisfies Ultralytics' font check)."""
    for cand in (explicit, REPO / ".whl-peer" / "Arial.ttf"):
        if cand is not None and cand.is_file():
            return cand
    try:
        import matplotlib

        dejavu = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
        return dejavu if dejavu.is_file() else None
    except ImportError:
        return None


def _peer_env(args: argparse.Namespace) -> tuple[dict[str, str], Path]:
    """The peer's environment (offline, its config folder holding a TTF as Arial) and the TTF."""
    cfg = args.work / "ultralytics-config"
    (cfg / "Ultralytics").mkdir(parents=True, exist_ok=True)
    font = _font_source(args.font)
    if font is None:
        raise FileNotFoundError("no TTF for Ultralytics' font check: pass --font FILE.ttf")
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        shutil.copyfile(font, cfg / "Ultralytics" / name)
    extra = {
        "YOLO_OFFLINE": "1",
        "YOLO_AUTOINSTALL": "False",
        "YOLO_CONFIG_DIR": str(cfg),
        "MPLCONFIGDIR": str(cfg / "mpl"),
    }
    return _child_env(args.device, extra), font


def _run_peer_half(
    args: argparse.Namespace,
    data: dict[str, Any],
    flag: str,
    project: Path,
    result: Path,
    log: Path,
    **extra: Any,
) -> tuple[int, float, Path]:
    """Run this script's ``flag`` half (``--peer-half``, ``--peer-validate``) in the peer's
    interpreter on a spec of the common settings plus ``extra``; ``(exit, wall s, TTF)``. The
    half writes its results to ``result``."""
    env, font = _peer_env(args)
    if project.exists():
        shutil.rmtree(project)
    spec = {
        "task": data["task"],
        "data": data["peer_data_yaml"],
        "imgsz": args.imgsz,
        "batch": args.batch,
        "workers": args.workers,
        "device": "cpu" if args.device == "cpu" else "0",
        "project": str(project),
        "result": str(result),
        **extra,
    }
    spec_path = args.work / f"{flag.removeprefix('--')}-spec.json"
    spec_path.write_text(json.dumps(spec, indent=1))
    script = Path(__file__).resolve().parent / "peer_detect.py"
    cmd = [args.peer_python or sys.executable, str(script), flag, str(spec_path)]
    print("peer: " + " ".join(cmd), flush=True)
    rc, wall = _run_logged(cmd, env, log, args.side_timeout)
    return rc, wall, font


def _rescored(raw: dict[str, Any], data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``raw``'s peer-validator results with each path's predictions re-scored by ours."""
    gt = json.loads(Path(data["val_json"]).read_text())
    out = dict(raw)
    for key in keys:
        pred = out.get(key, {}).get("predictions")
        if pred and Path(pred).is_file():
            if data["task"] == "obb":
                out[key] = {**out[key], **rescore_rotated(Path(pred), data)}
            else:
                out[key] = {**out[key], **rescore(Path(pred), gt, data, data["task"])}
    return out


def cross_validate(
    args: argparse.Namespace, data: dict[str, Any], checkpoint: Path, out: Path
) -> dict[str, Any]:
    """Our trained weights validated by the peer's validator: the other half of the cross
    table beside `validate_with_lucid`. The weights go under the authors' names into the
    peer's own model class (in the peer's interpreter), which its validator then runs, square
    canvases, both decodes; the predictions are re-scored by our scorer."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO / "tests" / "support"))
    from lucid_testing.authors_layout import authors_state_dict
    from lucid_train.tasks.restore import load_module

    module = load_module(checkpoint)
    state = args.work / "lucid-weights-authors-names.pt"
    torch.save(authors_state_dict(module, dtype=torch.float32), state)
    keypoints = module.hparams.get("num_keypoints")
    rc, wall, _ = _run_peer_half(
        args,
        data,
        "--peer-validate",
        args.work / "cross-runs",
        out / "cross-raw.json",
        out / "cross.log",
        state=str(state),
        nc=int(module.hparams["num_classes"]),
        kpt_shape=[int(keypoints), 3] if keypoints else None,
    )
    result: dict[str, Any] = {"exit": rc, "wall_s": round(wall, 1), "checkpoint": str(checkpoint)}
    raw = out / "cross-raw.json"
    if raw.is_file():
        result.update(_rescored(json.loads(raw.read_text()), data, PATHS))
    return result


def run_peer(args: argparse.Namespace, data: dict[str, Any], out: Path) -> dict[str, Any]:
    """Train and validate Ultralytics yolo26n in a subprocess, then re-score its predictions with
    our pycocotools scorer."""
    launch = time.time()
    rc, wall, font = _run_peer_half(
        args,
        data,
        "--peer-half",
        args.work / "peer-runs",
        out / "peer-raw.json",
        out / "peer.log",
        seed=args.seed,
        epochs=args.epochs,
    )
    result: dict[str, Any] = {"exit": rc, "wall_s": round(wall, 1), "font": str(font),
                              "launch_unix": launch}  # fmt: skip
    raw_path = out / "peer-raw.json"
    if not raw_path.is_file():
        return result
    keys = (*PATHS, *(f"{path}_rect" for path in PATHS))
    result.update(_rescored(json.loads(raw_path.read_text()), data, keys))
    csv_path = out / "peer-results.csv"
    if csv_path.is_file() and result.get("train_time_start_unix"):
        result["epoch_log"] = peer_epoch_log(csv_path, result["train_time_start_unix"] - launch)
    weights = Path(result.get("weights", ""))
    if weights.is_file():
        try:
            result["lucid_validation"] = validate_with_lucid(weights, data, args)
        except Exception as err:  # the peer's own rows stand; say why this one is missing
            result["lucid_validation"] = {"error": f"{type(err).__name__}: {err}"}
    # the e2e val must have run the one-to-one head and the nms val the one-to-many head
    result["decode_paths_checked"] = all(
        result.get(path, {}).get("validator_end2end") is (path == "e2e") for path in PATHS
    )
    return result


def peer_epoch_log(csv_path: Path, offset: float) -> list[dict[str, Any]]:
    """The peer's per-epoch validation (its metric, the one-to-many head plus NMS, as its
    training validates) from ``results.csv``, each epoch's ``time`` (seconds from its training
    start, taken after that epoch's validation) moved to seconds from the side's launch."""
    import csv

    log: list[dict[str, Any]] = [{"epoch": 0, "t_s": round(offset, 2), "note": "training start"}]
    for r in csv.DictReader(csv_path.open()):
        r = {k.strip(): v for k, v in r.items()}
        entry: dict[str, Any] = {
            "epoch": int(float(r["epoch"])),
            "t_s": round(offset + float(r["time"]), 2),
        }
        entry["nms_box"] = float(r["metrics/mAP50-95(B)"])
        if "metrics/mAP50-95(M)" in r:
            entry["nms_mask"] = float(r["metrics/mAP50-95(M)"])
        log.append(entry)
    return log


def rescore_run(report: dict[str, Any], args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """A finished run's report with every validation-side row made again by this checkout's
    code from the trained weights, without training: ours (its checkpoint by lucid's
    validation, then by the peer's), the peer's weights by lucid's validation. The peer's own
    validation rows are kept as they were. For a change to validation, not to training."""
    data = report["data"]
    for arm, ours in report.get("ours_arms", {}).items():
        ckpt = Path(ours.get("checkpoint") or _checkpoint_of(ours.get("command", ""), data["task"]))
        if not ckpt.is_file():
            continue
        ours["checkpoint"] = str(ckpt)
        fresh = validate_with_lucid(ckpt, data, args, lucid_checkpoint=True)
        for path in PATHS:
            ours.setdefault(path, {}).update(fresh[path])
        ours["rescored"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        if data["task"] != "obb":
            ours["ultralytics_validation"] = cross_validate(
                args, data, ckpt, out / f"cross-acc{arm}"
            )
    peer = report.get("peer", {})
    weights = Path(peer.get("weights", ""))
    if weights.is_file():
        peer["lucid_validation"] = validate_with_lucid(weights, data, args)
    return report
