"""Our side: `lucid fit` as a subprocess, its per-epoch validation log, and lucid's validation of
any trained weights (ours or the peer's)."""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from peer_common import (
    MODEL_SUFFIX,
    PATHS,
    _child_env,
    _last_row_with,
    _metric_prefixes,
    _run_logged,
)

# An arm is ``ACCUMULATE[+OPTION...]``: ``auto+batch`` draws mosaic partners from the sample's own
# batch (assumptions D23; ``+buffer``, the authors' rule, is the default since 2026-12-04) at the
# authors' cadence, ``+once`` without the load-time resize (one
# resample, D24; ``+resize`` asks for it explicitly, the default since 2026-12-03) and ``+cpu``
# paints in the loader workers instead of on the GPU (D18); ``+allcats`` trains every category of
# the COCO file, one without annotations too (the rule before 2026-12-05, D22: on a hard set it
# measures what the empty class costs on its own, the peer keeping the annotated ones);
# ``+hsvauthors`` applies the colour jitter by the authors' 8-bit HSV round trip instead of the
# colour matrix (D13); ``+det`` seeds as the authors' default does, deterministic algorithms
# with a warning where there are none (their ``deterministic: True``, T94); so an A/B of a data
# option is one more arm beside the default in the same call.

ARM_OPTIONS = {
    "buffer": ["--data.mosaic_pool", "buffer"],
    "batch": ["--data.mosaic_pool", "batch"],
    "resize": ["--data.load_resize", "true"],
    "once": ["--data.load_resize", "false"],
    "cpu": ["--data.render", "cpu"],
    "hsvauthors": ["--data.augment.hsv_rule", "authors"],
    "det": ["--trainer.deterministic", "warn"],
}
# Options that are an environment switch of our fit rather than a flag.
ARM_ENV = {
    "losshalf": {"LUCID_LOSS_ARITHMETIC": "authors"},  # the authors' float16 loss reads, T93
}


def arm_env(arm: str) -> dict[str, str]:
    """The environment ``arm``'s options set for our fit (``ARM_ENV``)."""
    env: dict[str, str] = {}
    for option in arm.split("+")[1:]:
        env.update(ARM_ENV.get(option, {}))
    return env


def arm_flags(arm: str, coco_root: str | None = None) -> tuple[str, list[str]]:
    """The accumulate setting of ``arm`` and the ``lucid fit`` flags of its options
    (``+allcats`` reads the category ids of the COCO set at ``coco_root``)."""
    accumulate, *options = arm.split("+")
    known = sorted([*ARM_OPTIONS, *ARM_ENV, "allcats"])
    unknown = [o for o in options if o not in known]
    if unknown:
        raise SystemExit(f"arm {arm!r}: unknown option(s) {unknown}; known: {known}")
    flags: list[str] = []
    for option in options:
        if option in ARM_ENV:
            continue
        if option != "allcats":
            flags += ARM_OPTIONS[option]
            continue
        if coco_root is None:
            raise SystemExit(f"arm {arm!r}: +allcats needs a COCO set (--set hard or held-out)")
        doc = json.loads((Path(coco_root) / "annotations" / "train.json").read_text())
        flags += ["--data.classes", json.dumps(sorted(int(c["id"]) for c in doc["categories"]))]
    return accumulate, flags


def run_ours(
    args: argparse.Namespace, data: dict[str, Any], out: Path, accumulate: str = "auto"
) -> dict[str, Any]:
    """Train our yolo26n with ``lucid fit`` and read the last validation of both decode paths;
    ``accumulate`` is an arm (``arm_flags``)."""
    task = data["task"]
    tag = f"ours-acc{accumulate}"
    setting, options = arm_flags(accumulate, data["coco_root"] if data["hard"] else None)
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
        setting,
        *options,
        "--run.root",
        str(runs),
        "--run.name",
        "train",
        "--seed_everything",
        str(args.seed),
        "--data.seed",
        str(args.seed),
    ]
    marks = out / f"{tag}-epochs.jsonl"  # each epoch's training window, Unix seconds
    marks.unlink(missing_ok=True)
    switches = arm_env(accumulate)
    env = _child_env(
        args.device,
        {"LUCID_CACHE_DIR": data["cache_dir"], "LUCID_EPOCH_MARKS": str(marks), **switches},
    )
    said = "".join(f"{k}={v} " for k, v in switches.items())
    print(f"ours: {said}" + " ".join(cmd), flush=True)
    launch = time.time()
    rc, wall = _run_logged(cmd, env, out / f"{tag}.log", args.side_timeout)
    result: dict[str, Any] = {
        "command": f"LUCID_CACHE_DIR={data['cache_dir']} {said}" + " ".join(cmd),
        "exit": rc,
        "wall_s": round(wall, 1),
        "launch_unix": launch,
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

    rows = [r for r in csv.DictReader(csv_path.open()) if r.get("val/e2e/mAP50-95")]
    result["best_e2e_mAP50-95"] = max(float(r["val/e2e/mAP50-95"]) for r in rows)
    result["best_nms_mAP50-95"] = max(float(r["val/nms/mAP50-95"]) for r in rows)
    log = (out / f"{tag}.log").read_text(errors="replace")
    for line in log.splitlines():
        if line.startswith("lucid fit: done in"):
            result["fit_line"] = line.strip()
    result["epoch_log"] = ours_epoch_log(csv_path, marks, launch, task)
    ckpt = Path(result["checkpoint"])
    if rc == 0 and ckpt.is_file():  # the size buckets, from the last weights' saved detections
        try:
            again = validate_with_lucid(ckpt, data, args, lucid_checkpoint=True,
                                        save_dir=out / f"{tag}-predictions")  # fmt: skip
            for path in PATHS:
                result[path].update({k: v for k, v in again[path].items() if "_AP_" in k})
                result[path]["revalidated_mAP50-95"] = again[path].get("pycocotools_mAP50-95")
        except Exception as err:  # the fit's rows stand; say why the buckets are missing
            result["sizes_error"] = f"{type(err).__name__}: {err}"
    return result


def ours_epoch_log(csv_path: Path, marks: Path, launch: float, task: str) -> list[dict[str, Any]]:
    """Each validated epoch's mAP50-95 (both paths; the task's second metric too) and when it was
    known, in seconds from the side's launch: the end of its validation (its ``validated`` mark,
    before the checkpoint of it is saved, as the peer's time is taken), else, from a fit that
    wrote no such marks, where the next epoch's training starts, the last one's when the fit
    wrote metrics.csv for the last time."""
    starts, validated = {}, {}
    if marks.is_file():
        for line in marks.read_text().splitlines():
            mark = json.loads(line)
            if "validated" in mark:
                validated[int(mark["epoch"])] = float(mark["validated"])
            else:
                starts[int(mark["epoch"])] = float(mark["start"])
    rows = [r for r in csv.DictReader(csv_path.open()) if r.get("val/e2e/mAP50-95")]
    log = []
    for k, r in enumerate(rows):
        epoch = int(float(r["epoch"]))
        end = starts.get(epoch + 1) if k + 1 < len(rows) else csv_path.stat().st_mtime
        end = validated.get(epoch, end)
        entry: dict[str, Any] = {
            "epoch": epoch + 1,
            "t_s": None if end is None else round(end - launch, 2),
        }
        for path in PATHS:
            for kind, stem in _metric_prefixes(task).items():
                entry[f"{path}_{kind}"] = float(r[f"val/{path}/{stem}mAP50-95"])
        log.append(entry)
    if starts:
        log.insert(
            0, {"epoch": 0, "t_s": round(min(starts.values()) - launch, 2), "note": "first batch"}
        )
    return log


def validate_with_lucid(
    weights: Path,
    data: dict[str, Any],
    args: argparse.Namespace,
    *,
    lucid_checkpoint: bool = False,
    save_dir: Path | None = None,
) -> dict[str, Any]:
    """Trained weights validated by lucid's own validation: the peer's ``last.pt`` (its EMA,
    read by ``--model.weights``' reader of the authors' layout: no code from the file runs),
    or with ``lucid_checkpoint`` a lucid checkpoint (its EMA weights). With ``save_dir`` its
    detections are saved there (``--save_json``'s files) and scored again with the size buckets.

    Validated exactly as our side's last epoch is: the same letterboxed inputs, both decodes,
    the same scorer. Beside the peer's own validation, re-scored, this tells a difference in
    training from one in validation."""
    import lightning as L

    from lucid_train.cli.results_files import SaveResults
    from lucid_train.data import LucidDataModule
    from lucid_train.data.classes import model_classes
    from lucid_train.tasks.module import schema_arguments
    from lucid_train.tasks.restore import load_module
    from lucid_train.tasks.task_modules import module_class

    task = data["task"]
    module = load_module(weights, task=task) if lucid_checkpoint else None
    dm = LucidDataModule(
        task, data["coco_root"], img_size=args.imgsz, batch_size=args.batch,
        num_workers=args.workers,
        classes=None if module is None else model_classes(module.schema.category_ids),
    )  # fmt: skip
    # The peer's weights: the classes a fit of ours trains, as `export_for_peer` gave the peer
    # (D22: read with train, a category without annotations is not one).
    dm.setup("validate" if module is not None else "fit")
    if module is None:
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
        callbacks=[] if save_dir is None else [SaveResults(save_dir)],
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
    if save_dir is not None and task in ("detect", "segment"):
        from peer_scoring import score_results

        gt = json.loads(Path(data["val_json"]).read_text())
        for path in PATHS:
            pred = save_dir / f"predictions_{path}.json"
            if pred.is_file():
                result[path].update(
                    {k: v for k, v in score_results(pred, gt, task).items() if "_AP_" in k}
                )
                pred.unlink()  # scored; megabytes a path, and a device call brings back little
    return result


def _checkpoint_of(command: str, task: str) -> str:
    """The last checkpoint of a `lucid fit` command line (its ``--run.root``; run ``train``)."""
    words = command.split()
    if "--run.root" not in words:
        return ""
    root = Path(words[words.index("--run.root") + 1])
    return str(root / task / "train" / "checkpoints" / "last.ckpt")
