"""Our yolo26n against Ultralytics 8.4 yolo26n, detect or segment, on a synthetic set.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):/tmp/site \
        python3 benchmarks/peer_detect.py --out OUT --epochs 20 --imgsz 320 --batch 16 --device 0
    # the harder set, segmentation, two of our accumulation settings:
    ... peer_detect.py --out OUT --task segment --set hard --ours-accumulate 1,auto

``--set builtin`` is the set ``lucid fit`` trains with no data argument; ``--set hard`` the
task's harder benchmark set (``SyntheticSpec.hard()``, read by ``lucid fit --data.root``).
Segment rows add mask mAP (Ultralytics' RLE masks re-scored by our pycocotools scorer).
``benchmarks/peer_accuracy.py`` runs the sides of several tasks side by side.

Steps (each side runs in its own subprocess, so neither library's process-wide settings reach
the other, and each wall time is that side's alone):

1. The set (built-in: ``synthetic_dataset(task)``, 400 train / 100 val images, COCO layout; or
   the harder one) is generated under ``--work`` and exported to YOLO txt with
   ``lucid_train.data.write_yolo``; the ``data.yaml`` handed to Ultralytics gets an absolute
   ``path`` (Ultralytics resolves a relative one against its datasets folder or the cwd).
2. Ours: ``python -m lucid_train fit`` with no data argument (``LUCID_CACHE_DIR`` points at the
   same cache), the recipe defaults, the given image size, batch and epochs. Its validation
   scores both decode paths with pycocotools every epoch; the last epoch's row of
   ``metrics.csv`` (the EMA weights that ``last.ckpt`` holds) is reported.
3. Peer: ``YOLO("yolo26n.yaml").train(pretrained=False, ...)`` offline (``YOLO_OFFLINE=1``,
   a TTF named ``Arial.ttf`` in ``$YOLO_CONFIG_DIR/Ultralytics``, settings ``sync=False``, its AMP
   check answered True on CUDA). Its ``last.pt`` (EMA) is then validated twice: ``nms=False``
   (the one-to-one head, top-k, no NMS) and ``nms=True`` (the one-to-many head plus NMS; 8.4's
   default ``nms=None`` is the same path). Each val saves ``predictions.json``.
4. The peer's predictions are re-scored here with our pycocotools scorer against the same COCO
   ground truth our validation uses, so the ``pycocotools`` columns of both sides share one
   metric definition. Ultralytics' own mAP (its matcher, up to 300 detections per image,
   pycocotools keeps 100) is reported beside it.

Writes ``OUT/peer_detect.json`` (numbers, wall times, versions, commands), ``OUT/peer_detect.md``
(the table), the logs of both sides and their small run files; prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PATHS = ("e2e", "nms")
CONF_NOTE = {
    "e2e": "one-to-one head, top-k 300, no NMS",
    "nms": "one-to-many head, NMS IoU 0.7, conf 0.001",
}


# ---------------------------------------------------------------------------------------------
# data


def export_for_peer(root: Path, task: str, yolo: Path) -> tuple[dict[str, Any], Path, Path]:
    """Read the COCO-layout set at ``root`` and write its YOLO txt copy to ``yolo`` (replaced):
    ``(splits, our data.yaml, the peer's data-peer.yaml)``. The peer's yaml gets an absolute
    ``path`` (Ultralytics reads a relative one against its datasets folder or the cwd) and, for
    pose, ``kpt_shape`` / ``flip_idx``; JSON is YAML, so no YAML writer is needed."""
    from lucid_train.data import read_coco, write_yolo

    splits = {
        s: read_coco(root / "annotations" / f"{s}.json", root / "images" / s, task=task)  # type: ignore[arg-type]
        for s in ("train", "val")
    }
    if yolo.exists():
        shutil.rmtree(yolo)
    ours_yaml = write_yolo(splits, yolo)
    schema = splits["val"].schema
    doc: dict[str, Any] = {
        "path": str(yolo.resolve()),
        "train": "images/train",
        "val": "images/val",
        "names": list(schema.class_names),
    }
    if task == "pose":
        doc["kpt_shape"] = [schema.num_keypoints, 3]
        doc["flip_idx"] = list(schema.flip_index)
    peer_yaml = yolo / "data-peer.yaml"
    peer_yaml.write_text(json.dumps(doc, indent=1) + "\n")
    return splits, ours_yaml, peer_yaml


def prepare_data(work: Path, task: str = "detect", hard: bool = False) -> dict[str, Any]:
    """Generate (or reuse) the task's built-in set, or its harder benchmark set
    (``SyntheticSpec.hard()``), under ``work/cache`` and export it to YOLO txt under
    ``work/yolo-<task>``; returns paths and counts."""
    from lucid_train.data import SyntheticSpec, synthetic_dataset

    cache = work / "cache"
    start = time.perf_counter()
    spec = SyntheticSpec.hard() if hard else None
    root = synthetic_dataset(task, cache_dir=cache, spec=spec)  # type: ignore[arg-type]
    gen_s = time.perf_counter() - start
    yolo = work / f"yolo-{task}{'-hard' if hard else ''}"
    splits, ours_yaml, peer_yaml = export_for_peer(root, task, yolo)
    schema = splits["val"].schema
    return {
        "task": task,
        "set": ("hard" if hard else "built-in") + f" {task} ({root.name})",
        "hard": hard,
        "cache_dir": str(cache),
        "coco_root": str(root),
        "val_json": str(root / "annotations" / "val.json"),
        "yolo_root": str(yolo),
        "yolo_data_yaml": str(ours_yaml),
        "peer_data_yaml": str(peer_yaml),
        "train_images": len(splits["train"].records),
        "val_images": len(splits["val"].records),
        "val_instances": int(sum(len(r.targets) for r in splits["val"].records)),
        "class_names": list(schema.class_names),
        "category_ids": [int(c) for c in schema.category_ids],
        "num_keypoints": int(schema.num_keypoints),
        "generate_s": round(gen_s, 2),
    }


# ---------------------------------------------------------------------------------------------
# helpers


def _run_logged(
    cmd: list[str], env: dict[str, str], log: Path, timeout: float
) -> tuple[int | str, float]:
    """Run ``cmd`` with stdout and stderr to ``log``; returns (exit status or "timeout", wall s)."""
    start = time.perf_counter()
    with log.open("w") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        try:
            rc: int | str = subprocess.run(
                cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    wall = time.perf_counter() - start
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-25:]
        print(f"[{log.name}] exit {rc}; last lines:\n" + "\n".join(tail), flush=True)
    return rc, wall


def _child_env(device: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if device != "cpu":
        env["CUDA_VISIBLE_DEVICES"] = device
    env.update(extra or {})
    return env


def _last_row_with(csv_path: Path, column: str) -> dict[str, str]:
    import csv

    rows = [r for r in csv.DictReader(csv_path.open()) if r.get(column)]
    if not rows:
        raise ValueError(f"{csv_path}: no row has {column}")
    return rows[-1]


# ---------------------------------------------------------------------------------------------
# ours


MODEL_SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}
EXTRA_KIND = {"segment": "mask", "pose": "pose"}  # the task's second metric beside the box one


def _metric_prefixes(task: str) -> dict[str, str]:
    """Metric kind -> the column stem in our metrics.csv (``val/<path>/<stem>mAP50-95``); obb's
    box kind is the rotated (DOTA protocol) metric."""
    kinds = {"box": ""}
    if task in EXTRA_KIND:
        kinds[EXTRA_KIND[task]] = f"{EXTRA_KIND[task]}_"
    return kinds


def run_ours(
    args: argparse.Namespace, data: dict[str, Any], out: Path, accumulate: str = "auto"
) -> dict[str, Any]:
    """Train our yolo26n with ``lucid fit`` and read the last validation of both decode paths."""
    task = data["task"]
    tag = f"ours-acc{accumulate}"
    runs = args.work / f"{tag}-runs"
    if runs.exists():
        shutil.rmtree(runs)
    precision = args.ours_precision or ("32-true" if args.device == "cpu" else "16-mixed")
    cmd = [
        args.ours_python or sys.executable,
        "-m",
        "lucid_train",
        "fit",
        "--model",
        f"yolo26n{MODEL_SUFFIX[task]}",
        *(["--data.root", data["coco_root"]] if data["hard"] else []),
        "--data.img_size",
        str(args.imgsz),
        "--data.batch_size",
        str(args.batch),
        "--data.num_workers",
        str(args.workers),
        "--trainer.max_epochs",
        str(args.epochs),
        "--trainer.accelerator",
        "cpu" if args.device == "cpu" else "gpu",
        "--trainer.devices",
        "1",
        "--trainer.precision",
        precision,
        "--trainer.accumulate_grad_batches",
        str(accumulate),
        "--run.root",
        str(runs),
        "--run.name",
        "train",
        "--seed_everything",
        str(args.seed),
        "--data.seed",
        str(args.seed),
    ]
    env = _child_env(args.device, {"LUCID_CACHE_DIR": data["cache_dir"]})
    print("ours: " + " ".join(cmd), flush=True)
    rc, wall = _run_logged(cmd, env, out / f"{tag}.log", args.side_timeout)
    result: dict[str, Any] = {
        "command": f"LUCID_CACHE_DIR={data['cache_dir']} " + " ".join(cmd),
        "exit": rc,
        "wall_s": round(wall, 1),
        "precision": precision,
        "accumulate": accumulate,
    }
    run_dir = runs / task / "train"
    csv_path = run_dir / "metrics.csv"
    if not csv_path.is_file():
        return result
    result["checkpoint"] = str(run_dir / "checkpoints" / "last.ckpt")
    shutil.copy(csv_path, out / f"{tag}-metrics.csv")
    last = _last_row_with(csv_path, "val/e2e/mAP50-95")
    for path in PATHS:
        result[path] = {}
        for kind, stem in _metric_prefixes(task).items():
            prefix = "" if kind == "box" else f"{kind}_"
            result[path][f"{prefix}pycocotools_mAP50-95"] = float(
                last[f"val/{path}/{stem}mAP50-95"]
            )
            result[path][f"{prefix}pycocotools_mAP50"] = float(last[f"val/{path}/{stem}mAP50"])
    result["epoch"] = int(float(last["epoch"])) + 1
    import csv

    rows = [r for r in csv.DictReader(csv_path.open()) if r.get("val/e2e/mAP50-95")]
    result["best_e2e_mAP50-95"] = max(float(r["val/e2e/mAP50-95"]) for r in rows)
    result["best_nms_mAP50-95"] = max(float(r["val/nms/mAP50-95"]) for r in rows)
    log = (out / f"{tag}.log").read_text(errors="replace")
    for line in log.splitlines():
        if line.startswith("lucid fit: done in"):
            result["fit_line"] = line.strip()
    return result


# ---------------------------------------------------------------------------------------------
# peer


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
    cmd = [args.peer_python or sys.executable, str(Path(__file__).resolve()), flag, str(spec_path)]
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
    result: dict[str, Any] = {"exit": rc, "wall_s": round(wall, 1), "font": str(font)}
    raw_path = out / "peer-raw.json"
    if not raw_path.is_file():
        return result
    keys = (*PATHS, *(f"{path}_rect" for path in PATHS))
    result.update(_rescored(json.loads(raw_path.read_text()), data, keys))
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


def validate_with_lucid(
    weights: Path, data: dict[str, Any], args: argparse.Namespace, *, lucid_checkpoint: bool = False
) -> dict[str, Any]:
    """Trained weights validated by lucid's own validation: the peer's ``last.pt`` (its EMA,
    read by ``--model.weights``' reader of the authors' layout: no code from the file runs),
    or with ``lucid_checkpoint`` a lucid checkpoint (its EMA weights).

    Validated exactly as our side's last epoch is: the same letterboxed inputs, both decodes,
    the same scorer. Beside the peer's own validation, re-scored, this tells a difference in
    training from one in validation."""
    import lightning as L

    from lucid_train.data import LucidDataModule
    from lucid_train.tasks.module import schema_arguments
    from lucid_train.tasks.restore import load_module
    from lucid_train.tasks.task_modules import module_class

    task = data["task"]
    dm = LucidDataModule(
        task, data["coco_root"], img_size=args.imgsz, batch_size=args.batch,
        num_workers=args.workers,
    )  # fmt: skip
    dm.setup("validate")
    if lucid_checkpoint:
        module = load_module(weights, task=task)
    else:
        module = module_class(task)(
            model=f"yolo26n{MODEL_SUFFIX[task]}",
            img_size=args.imgsz,
            capture="off",
            weights=str(weights),
            **schema_arguments(dm.schema),
        )
    on_cpu = args.device == "cpu"
    trainer = L.Trainer(
        accelerator="cpu" if on_cpu else "gpu",
        devices=1 if on_cpu else [int(args.device)],
        precision=args.ours_precision or ("32-true" if on_cpu else "16-mixed"),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.perf_counter()
    metrics = trainer.validate(module, datamodule=dm, verbose=False)[0]
    result: dict[str, Any] = {"weights": str(weights), "wall_s": 0.0}
    for path in PATHS:
        result[path] = {}
        for kind, stem in _metric_prefixes(task).items():
            prefix = "" if kind == "box" else f"{kind}_"
            for stat in ("mAP50-95", "mAP50"):
                value = metrics.get(f"val/{path}/{stem}{stat}")
                result[path][f"{prefix}pycocotools_{stat}"] = (
                    None if value is None else float(value)
                )
    result["wall_s"] = round(time.perf_counter() - start, 1)
    return result


def _checkpoint_of(command: str, task: str) -> str:
    """The last checkpoint of a `lucid fit` command line (its ``--run.root``; run ``train``)."""
    words = command.split()
    if "--run.root" not in words:
        return ""
    root = Path(words[words.index("--run.root") + 1])
    return str(root / task / "train" / "checkpoints" / "last.ckpt")


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


def rescore(
    pred_json: Path, gt: dict[str, Any], data: dict[str, Any], task: str = "detect"
) -> dict[str, Any]:
    """Score Ultralytics' ``predictions.json`` with our pycocotools scorer against our COCO
    ground truth (boxes; segment also its RLE masks, pose its keypoints with our OKS sigmas,
    assumptions D12). Its image ids come from file stems and its category ids are 1 + class
    index, so both are mapped through the file name and ``category_ids``."""
    from lucid_train.evaluation import coco_from_dict, keypoint_sigmas, run_cocoeval

    category_ids = data["category_ids"]
    by_name = {img["file_name"]: int(img["id"]) for img in gt["images"]}
    dets, masks, kpts = [], [], []
    for d in json.loads(pred_json.read_text()):
        det = {
            "image_id": by_name[d["file_name"]],
            "category_id": int(category_ids[int(d["category_id"]) - 1]),
            "bbox": [float(v) for v in d["bbox"]],
            "score": float(d["score"]),
        }
        dets.append(det)
        if task == "segment" and "segmentation" in d:
            masks.append({**det, "segmentation": d["segmentation"]})
        if task == "pose" and "keypoints" in d:
            kpts.append({**det, "keypoints": [float(v) for v in d["keypoints"]]})
    coco = coco_from_dict(gt)
    stats = run_cocoeval(coco, dets, "bbox")
    images = {d["image_id"] for d in dets}
    result = {
        "pycocotools_mAP50-95": stats["mAP"],
        "pycocotools_mAP50": stats["mAP50"],
        "detections": len(dets),
        "images_with_detections": len(images),
    }
    if task == "segment":
        segm = run_cocoeval(coco, masks, "segm")
        result["mask_pycocotools_mAP50-95"] = segm["mAP"]
        result["mask_pycocotools_mAP50"] = segm["mAP50"]
    if task == "pose":
        sigmas = keypoint_sigmas(int(data["num_keypoints"]))
        oks = run_cocoeval(coco, kpts, "keypoints", sigmas)
        result["pose_pycocotools_mAP50-95"] = oks["mAP"]
        result["pose_pycocotools_mAP50"] = oks["mAP50"]
    return result


def rescore_rotated(pred_json: Path, data: dict[str, Any]) -> dict[str, Any]:
    """Score Ultralytics' OBB ``predictions.json`` (``rbox`` in source pixels, radians) with our
    DOTA-protocol evaluator against the set's rotated ground truth in the same pixels (rotated IoU
    does not depend on the angle convention). The keys say ``pycocotools`` for the table's sake;
    the scorer is ``RotatedEvaluator``, as in our validation."""
    from lucid_train.data import read_coco
    from lucid_train.evaluation import RotatedEvaluator

    root = Path(data["coco_root"])
    index = read_coco(root / "annotations" / "val.json", root / "images" / "val", task="obb")
    label_of = {int(c): i for i, c in enumerate(data["category_ids"])}
    by_name: dict[str, list[dict[str, Any]]] = {}
    for d in json.loads(pred_json.read_text()):
        by_name.setdefault(d["file_name"], []).append(d)
    ev = RotatedEvaluator(len(data["category_ids"]))
    for rec in index.records:
        dets = by_name.get(rec.path.name, [])
        t = rec.targets
        ev.add(
            [d["rbox"] for d in dets],
            [float(d["score"]) for d in dets],
            [label_of[int(data["category_ids"][int(d["category_id"]) - 1])] for d in dets],
            t.rboxes if t.rboxes is not None else [],
            t.labels,
            t.difficult,
        )
    stats = ev.compute()
    return {
        "pycocotools_mAP50-95": stats["mAP50_95"],
        "pycocotools_mAP50": stats["mAP50"],
        "detections": sum(len(v) for v in by_name.values()),
    }


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
        import ultralytics.engine.trainer as trainer_module

        trainer_module.check_amp = lambda *a, **k: True
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
    out.update(_peer_vals(last, spec, common, task, rect_too=True))
    Path(spec["result"]).write_text(json.dumps(out, indent=1))


# ---------------------------------------------------------------------------------------------
# report


def _versions() -> dict[str, Any]:
    v: dict[str, Any] = {"python": platform.python_version()}
    try:
        import torch

        v["torch"] = torch.__version__
        v["cuda_device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except ImportError:
        pass
    try:
        import lightning

        v["lightning"] = lightning.__version__
    except ImportError:
        pass
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    )
    v["lucid_commit"] = head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    return v


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else "n/a"


def _kinds(task: str) -> list[str]:
    return list(_metric_prefixes(task))


def _key(kind: str, source: str) -> str:
    return ("" if kind == "box" else f"{kind}_") + f"{source}_mAP50-95"


def table(report: dict[str, Any]) -> str:
    """The markdown table of every side and both decode paths."""
    s, d = report["settings"], report["data"]
    lines = [
        f"yolo26n {d['task']}, {d['set']}: {d['train_images']} train / {d['val_images']} val "
        f"images, {d['val_instances']} val instances; imgsz {s['imgsz']}, batch {s['batch']}, "
        f"{s['epochs']} epochs, device {s['device']}; last-epoch EMA weights.",
        "",
        "| side | decode path | metric | mAP50-95 (pycocotools) | mAP50-95 (Ultralytics metric) "
        "| side wall s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    sides = [(f"lucid, accumulate {a}", r) for a, r in report.get("ours_arms", {}).items()]
    for a, r in report.get("ours_arms", {}).items():
        if "e2e" in r.get("ultralytics_validation", {}):
            sides.append(
                (
                    f"lucid weights (accumulate {a}), Ultralytics validation",
                    r["ultralytics_validation"],
                )
            )
    if "peer" in report:
        ver = report["peer"].get("versions", {}).get("ultralytics", "")
        sides.append((f"Ultralytics {ver}".strip(), report["peer"]))
        if "e2e_rect" in report["peer"]:
            rect = {p: report["peer"][f"{p}_rect"] for p in PATHS if f"{p}_rect" in report["peer"]}
            sides.append(
                (f"Ultralytics {ver}, its rectangular val batches", {**rect, "wall_s": ""})
            )
        if "e2e" in report["peer"].get("lucid_validation", {}):
            sides.append(
                (f"Ultralytics {ver} weights, lucid validation", report["peer"]["lucid_validation"])
            )
    for name, r in sides:
        for path in PATHS:
            p = r.get(path, {})
            for kind in _kinds(d["task"]):
                lines.append(
                    f"| {name} | {path} ({CONF_NOTE[path]}) | {kind} "
                    f"| {_fmt(p.get(_key(kind, 'pycocotools')))} "
                    f"| {_fmt(p.get(_key(kind, 'ultralytics')))} | {r.get('wall_s', 'n/a')} |"
                )
    peer = report.get("peer", {})
    if "decode_paths_checked" in peer:
        ok = "yes" if peer["decode_paths_checked"] else "NO"
        lines += ["", f"Ultralytics validator ran end2end for e2e and not for nms: {ok}."]
    if "verdict" in report:
        lines += ["", report["verdict"]]
    return "\n".join(lines)


def accuracy_rows(report: dict[str, Any], arm: str) -> list[dict[str, Any]]:
    """``peer-accuracy.json`` rows: one per decode path and metric, ours (arm ``arm``) beside
    Ultralytics, both scored by one scorer (pycocotools; obb: our DOTA-protocol evaluator, whose
    mAP50 is the DOTA-style row)."""
    d, rows = report["data"], []
    ours, peer = report.get("ours_arms", {}).get(arm, {}), report.get("peer", {})
    lucid_val = peer.get("lucid_validation") or {}
    metrics = [(kind, "mAP50-95") for kind in _kinds(d["task"])]
    if d["task"] == "obb":
        metrics.append(("box", "mAP50"))
    for path in PATHS:
        for kind, stat in metrics:
            key = _key(kind, "pycocotools").replace("mAP50-95", stat)
            name = {"box": "rotated " if d["task"] == "obb" else ""}.get(kind, f"{kind} ")
            rows.append(
                {
                    "task": d["task"],
                    "set": d["set"],
                    "path": path,
                    "metric": f"{name}{stat}",
                    "lucid": ours.get(path, {}).get(key),
                    "ultralytics": peer.get(path, {}).get(key),
                    "ultralytics_lucid_validation": lucid_val.get(path, {}).get(key),
                    "ultralytics_rect_batches": peer.get(f"{path}_rect", {}).get(key),
                    "lucid_ultralytics_validation": ours.get("ultralytics_validation", {})
                    .get(path, {})
                    .get(key),
                    "lucid_accumulate": arm,
                    "seed": report["settings"].get("seed", 0),
                }
            )
    return rows


def verdict(report: dict[str, Any], arm: str, bar: float | None = None) -> str | None:
    """Ours (arm ``arm``) >= Ultralytics - ``bar`` on every decode path and metric; the issue's
    bars: 0.01 for detect and segment, 0.02 for pose and obb."""
    if bar is None:
        bar = 0.02 if report["data"]["task"] in ("pose", "obb") else 0.01
    parts, ok = [], True
    for row in accuracy_rows(report, arm):
        a, b = row["lucid"], row["ultralytics"]
        if a is None or b is None:
            return None
        ok &= a - b >= -bar
        parts.append(f"{row['path']} {row['metric']}: ours - Ultralytics = {a - b:+.4f}")
    head = "PASS" if ok else "FAIL"
    return f"{head} (ours, accumulate {arm}, >= Ultralytics - {bar}): " + "; ".join(parts)


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run the benchmark (or, with ``--peer-half``, one side)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="results folder (JSON, table, logs)")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--device", default="0", help="a CUDA index, or cpu")
    side = parser.add_mutually_exclusive_group()
    side.add_argument("--ours-only", action="store_true")
    side.add_argument("--peer-only", action="store_true")
    parser.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/lucid-peer-detect"),
        help="dataset cache, YOLO export and both sides' runs (kept out of --out)",
    )
    parser.add_argument("--font", type=Path, default=None, help="TTF placed as Arial.ttf")
    parser.add_argument(
        "--ours-precision", default=None, help="default: 16-mixed on CUDA (as amp=True), else 32"
    )
    parser.add_argument("--task", default="detect", choices=tuple(MODEL_SUFFIX))
    parser.add_argument(
        "--set", default="builtin", choices=("builtin", "hard"), help="built-in or harder set"
    )
    parser.add_argument(
        "--ours-accumulate",
        default="auto",
        help="comma list of our --trainer.accumulate_grad_batches arms, e.g. '1,auto' (auto: "
        "the nominal batch of 64 ramped in warm-up, as the peer); the last arm is judged",
    )
    parser.add_argument("--side-timeout", type=float, default=540.0, help="seconds per side")
    parser.add_argument("--seed", type=int, default=0, help="both sides' training seed")
    parser.add_argument("--ours-python", default=None, help="interpreter for our side")
    parser.add_argument("--peer-python", default=None, help="interpreter for the Ultralytics side")
    parser.add_argument("--peer-half", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--peer-validate", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--no-cross", action="store_true", help="skip our weights through the peer's validator"
    )
    args = parser.parse_args(argv)
    if args.peer_half is not None:
        peer_half(args.peer_half)
        return
    if args.peer_validate is not None:
        peer_validate_half(args.peer_validate)
        return
    if args.out is None:
        parser.error("--out is required")
    start = time.perf_counter()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "command": " ".join([sys.executable, *sys.argv]),
        "settings": {
            k: getattr(args, k) for k in ("epochs", "imgsz", "batch", "workers", "device", "seed")
        },
        "versions": _versions(),
        "metric_note": (
            "pycocotools columns: COCO bbox AP@[.5:.95] (101-point, maxDets 100) of each side's "
            "detections in source-image pixels against the same COCO ground truth (the set's "
            "val.json); Ultralytics-metric column: its own matcher on up to 300 detections."
        ),
    }
    data = prepare_data(args.work, args.task, hard=args.set == "hard")
    report["data"] = data
    print(f"data: {data['train_images']} train / {data['val_images']} val -> {data['yolo_root']}")
    arms = [a.strip() for a in str(args.ours_accumulate).split(",") if a.strip()]
    if not args.peer_only:
        report["ours_arms"] = {a: run_ours(args, data, out, a) for a in arms}
    if not args.ours_only:
        report["peer"] = run_peer(args, data, out)
    if not args.peer_only and not args.no_cross:  # the peer's interpreter validates ours too
        for arm, ours in report["ours_arms"].items():
            if Path(ours.get("checkpoint", "")).is_file():
                ours["ultralytics_validation"] = cross_validate(
                    args, data, Path(ours["checkpoint"]), out / f"cross-acc{arm}"
                )
    v = verdict(report, arms[-1])
    if v is not None:
        report["verdict"] = v
    report["rows"] = [row for a in arms for row in accuracy_rows(report, a)]
    report["total_wall_s"] = round(time.perf_counter() - start, 1)
    (out / "peer_detect.json").write_text(json.dumps(report, indent=1, default=str))
    text = table(report)
    (out / "peer_detect.md").write_text(text + "\n")
    print(text)
    print(f"total wall {report['total_wall_s']} s; wrote {out / 'peer_detect.json'}")


if __name__ == "__main__":
    main()
