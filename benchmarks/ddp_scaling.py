"""Data-parallel scaling of `lucid fit`: train-only images/s on 1 and 2 GPUs, capture on and off.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):tests/support:/tmp/site \
        python3 benchmarks/ddp_scaling.py --work /tmp/ddp-bench --out docs/benchmarks/ddp.md

yolo26n detect at 640, 16-mixed, batch 64 per GPU (``--data.batch_size`` is global: 64 on one
GPU, 128 on two; assumptions.md T86), accumulation 1 (the same step on every arm), the hard
synthetic set as JPEGs (`speed_set.make_set`), device rendering and decoding, no validation.
Images/s is ``time/train_images_per_s`` of metrics.csv (all ranks' images, first batch to last,
validation excluded), averaged over the epochs after the first (which records and starts the
workers). Scaling efficiency = images/s on N GPUs / (N x images/s on one). The bar (issue 17):
at least 0.9 per added GPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import speed_set  # the sibling module: the JPEG set

PER_GPU_BATCH = 64


def run_arm(
    args: argparse.Namespace, data: dict[str, Any], gpus: int, capture: str
) -> dict[str, Any]:
    runs = args.work / f"runs-{gpus}gpu-{capture}"
    if runs.exists():
        shutil.rmtree(runs)
    cmd = [
        sys.executable, "-m", "lucid_train", "fit",
        "--model", "yolo26n",
        "--data.root", data["coco"],
        "--data.img_size", "640",
        "--data.batch_size", str(PER_GPU_BATCH * gpus),
        "--trainer.devices", str(gpus),
        "--trainer.max_epochs", str(args.epochs),
        "--trainer.precision", "16-mixed",
        "--trainer.accumulate_grad_batches", "1",
        "--trainer.check_val_every_n_epoch", str(args.epochs + 1),
        "--model.capture", capture,
        "--run.root", str(runs),
        "--run.name", "train",
    ]  # fmt: skip
    log = args.out.parent / f"ddp-{gpus}gpu-{capture}.log"
    start = time.perf_counter()
    with log.open("w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
    result: dict[str, Any] = {
        "gpus": gpus,
        "capture": capture,
        "command": " ".join(cmd),
        "exit": rc,
        "wall_s": round(time.perf_counter() - start, 1),
    }
    metrics = runs / "detect" / "train" / "metrics.csv"
    if metrics.is_file():
        rows = [r for r in csv.DictReader(metrics.open()) if r.get("time/train_images_per_s")]
        per_epoch = [float(r["time/train_images_per_s"]) for r in rows]
        result["epoch_img_s"] = [round(v, 1) for v in per_epoch]
        result["img_s"] = round(statistics.fmean(per_epoch[1:]), 1) if len(per_epoch) > 1 else None
    text = log.read_text()
    result["stream_warning"] = "AccumulateGrad node's stream does not match" in text
    result["capture_summary"] = [line for line in text.splitlines() if "lucid-capture:" in line]
    return result


def table(results: list[dict[str, Any]]) -> str:
    by = {(r["gpus"], r["capture"]): r for r in results}
    lines = [
        "| capture | 1 GPU img/s | 2 GPUs img/s | scaling efficiency "
        "| epochs (1 GPU) | epochs (2 GPUs) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for capture in ("on", "off"):
        one, two = by.get((1, capture), {}), by.get((2, capture), {})
        a, b = one.get("img_s"), two.get("img_s")
        eff = f"{b / (2 * a):.3f}" if a and b else "n/a"
        epochs = f"{one.get('epoch_img_s')} | {two.get('epoch_img_s')}"
        lines.append(f"| {capture} | {a} | {b} | {eff} | {epochs} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help="markdown file (a .json goes beside)")
    p.add_argument("--images", type=int, default=2048)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--gpus", default="1,2")
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    data = speed_set.make_set(args.work, "detect", args.images)
    results = [
        run_arm(args, data, int(gpus), capture)
        for gpus in args.gpus.split(",")
        for capture in ("on", "off")
    ]
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2))
    print(table(results))
    for r in results:
        print(r["gpus"], r["capture"], "exit", r["exit"], "stream warning", r["stream_warning"])


if __name__ == "__main__":
    main()
