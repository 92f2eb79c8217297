"""Training speed against the authors' trainer, end to end, with GPU utilisation beside it.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):/tmp/site \\
        python3 benchmarks/peer_speed.py --out OUT --tasks detect,segment --batches 16,64

One run on the GPU machine, sides one after another (never side by side: this measures speed):

1. A 640 set of JPEGs (quality 90) of mixed sizes and aspect ratios, 1,024 train / 16 val
   images by default: the harder scenes (`SyntheticSpec.hard`, sides 480-640 drawn
   independently), generated in 16 independently seeded shards side by side and re-encoded
   from PNG, in COCO layout for ours and exported to YOLO txt for the peer.
2. Per task and batch: Ultralytics 8.4 (``amp=True``, ``deterministic=False``, ``plots=False``,
   ``val=False``, nominal batch 64), `lucid fit` with capture on and with capture off (16-mixed,
   accumulation ``auto`` = the same nominal batch, no validation), and the loader alone
   (`benchmark_loader`). Train-only images/s of the steady epochs (2 to the
   last, 0-based epoch 0 excluded): ours from ``time/train_images_per_s`` in metrics.csv, the
   peer's from per-epoch callbacks synchronised with the device.
3. ``nvidia-smi`` samples utilisation every 250 ms during each side; the mean over the side's
   steady epochs is reported.

Writes ``OUT/peer-speed.json`` (``{"date", "runs": [{"task", "batch", "ultralytics_img_s",
"lucid_img_s", "lucid_eager_img_s", "loader_img_s", "gpu_util", "ratio", ...}]}``) and
``OUT/peer-speed.md``, after every row (a killed run keeps the rows it finished).
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import peer_detect  # noqa: E402  (the sibling script: environment, logging, the peer's setup)

SHARDS = 16  # the set is generated in this many independently seeded parts, side by side


def _make_shard(job: tuple[str, int, int, int, str]) -> tuple[int, dict[str, Any]]:
    """Shard ``k`` of the set: its scenes (seed ``k``) as JPEGs under ``coco``, and its two
    COCO documents (image and annotation ids still the shard's own)."""
    from PIL import Image

    from lucid_train.data import SyntheticSpec, synthetic_dataset

    task, k, train, val, coco = job
    spec = SyntheticSpec(train, val, min_side=480, max_side=640, difficulty="hard")
    src = synthetic_dataset(task, cache_dir=Path(coco).parent / "png", spec=spec, seed=k)  # type: ignore[arg-type]
    docs = {}
    for split in ("train", "val"):
        doc = json.loads((src / "annotations" / f"{split}.json").read_text())
        out = Path(coco) / "images" / split
        out.mkdir(parents=True, exist_ok=True)
        for im in doc["images"]:
            name = f"s{k:02d}-{Path(im['file_name']).with_suffix('.jpg').name}"
            Image.open(src / "images" / split / im["file_name"]).convert("RGB").save(
                out / name, quality=90
            )
            im["file_name"] = name
        docs[split] = doc
    return k, docs


def make_set(work: Path, task: str, images: int, seed: int = 0) -> dict[str, Any]:
    """The JPEG set in COCO layout (``work/coco-TASK``) and its YOLO export (``work/yolo-TASK``):
    `SHARDS` harder-scene sets generated side by side (seeds ``seed``..), merged with fresh ids."""
    from concurrent.futures import ProcessPoolExecutor

    coco = work / f"coco-{task}"
    if not (coco / "annotations" / "val.json").is_file():
        per = -(-images // SHARDS)
        jobs = [(task, seed + k, per, 1, str(coco)) for k in range(SHARDS)]
        with ProcessPoolExecutor(SHARDS) as pool:
            shards = dict(pool.map(_make_shard, jobs))
        (coco / "annotations").mkdir(parents=True, exist_ok=True)
        for split in ("train", "val"):
            merged: dict[str, Any] = {"images": [], "annotations": []}
            for k in sorted(shards):
                doc = shards[k][split]
                merged.setdefault("categories", doc["categories"])
                ids = {}
                for im in doc["images"]:
                    ids[im["id"]] = im["id"] = len(merged["images"]) + 1
                    merged["images"].append(im)
                for ann in doc["annotations"]:
                    ann["image_id"] = ids[ann["image_id"]]
                    ann["id"] = len(merged["annotations"]) + 1
                    merged["annotations"].append(ann)
            (coco / "annotations" / f"{split}.json").write_text(json.dumps(merged))
    splits, _, peer_yaml = peer_detect.export_for_peer(coco, task, work / f"yolo-{task}")
    return {
        "coco": str(coco),
        "peer_yaml": str(peer_yaml),
        "train_images": len(splits["train"].records),
    }


class Sampler:
    """``nvidia-smi`` utilisation every 250 ms, with the wall time of each sample."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Sampler:
        fh = self.log.open("w")
        try:
            self.proc = subprocess.Popen(
                [
                    "nvidia-smi",
                    "--query-gpu=timestamp,utilization.gpu",
                    "--format=csv,noheader,nounits",
                    "-lms",
                    "250",
                ],
                stdout=fh,
                stderr=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            self.proc = None
        self.started = time.time()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()

    def mean_between(self, start: float, end: float) -> float | None:
        """Mean utilisation (%) of the samples taken between two wall times (``time.time``)."""
        values = []
        for line in self.log.read_text().splitlines():
            try:
                stamp, util = (x.strip() for x in line.split(","))
                t = time.mktime(time.strptime(stamp.split(".")[0], "%Y/%m/%d %H:%M:%S"))
                t += float("0." + stamp.split(".")[1]) if "." in stamp else 0.0
            except (ValueError, IndexError):
                continue
            if start <= t <= end:
                values.append(float(util))
        return round(statistics.fmean(values), 1) if values else None


def run_ours(
    args: argparse.Namespace, task: str, batch: int, data: dict[str, Any], capture: str, out: Path
) -> dict[str, Any]:
    runs = args.work / f"ours-{task}-{batch}-{capture}"
    if runs.exists():
        shutil.rmtree(runs)
    cmd = [
        sys.executable,
        "-m",
        "lucid_train",
        "fit",
        "--model",
        f"yolo26n{peer_detect.MODEL_SUFFIX[task]}",
        "--data.root",
        data["coco"],
        "--data.img_size",
        "640",
        "--data.batch_size",
        str(batch),
        "--data.num_workers",
        str(args.workers),
        "--trainer.max_epochs",
        str(args.epochs),
        "--trainer.precision",
        "auto",
        "--trainer.accumulate_grad_batches",
        "auto",
        "--trainer.check_val_every_n_epoch",
        str(args.epochs + 1),
        "--model.capture",
        capture,
        "--run.root",
        str(runs),
        "--run.name",
        "train",
        *args.lucid_flags.split(),
    ]
    tag = f"ours-{task}-b{batch}-{capture}"
    marks_file = out / f"{tag}-epochs.jsonl"
    marks_file.unlink(missing_ok=True)
    env = peer_detect._child_env(args.device, {"LUCID_EPOCH_MARKS": str(marks_file)})
    with Sampler(out / f"{tag}-gpu.csv") as gpu:
        rc, wall = peer_detect._run_logged(cmd, env, out / f"{tag}.log", args.side_timeout)
    result: dict[str, Any] = {"command": " ".join(cmd), "exit": rc, "wall_s": round(wall, 1)}
    metrics = runs / task / "train" / "metrics.csv"
    if metrics.is_file():
        rows = [r for r in csv.DictReader(metrics.open()) if r.get("time/train_images_per_s")]
        steady = [float(r["time/train_images_per_s"]) for r in rows if int(float(r["epoch"])) >= 1]
        result["epoch_img_s"] = [round(float(r["time/train_images_per_s"]), 1) for r in rows]
        result["img_s"] = round(statistics.fmean(steady), 1) if steady else None
        # GPU utilisation over the steady epochs' own windows (first batch to last, as timed)
        lines = marks_file.read_text().splitlines() if marks_file.is_file() else []
        steady_marks = [m for m in map(json.loads, lines) if m["epoch"] >= 1]
        if steady_marks:
            result["gpu_util"] = gpu.mean_between(steady_marks[0]["start"], steady_marks[-1]["end"])
    return result


def peer_half(spec_path: Path) -> None:
    """The Ultralytics side, in its own process: train and time each epoch, synchronised."""
    spec = json.loads(spec_path.read_text())
    import torch
    import ultralytics.engine.trainer as trainer_module
    from ultralytics import YOLO, settings

    trainer_module.check_amp = lambda *a, **k: True  # would fetch yolo26n.pt; AMP stays on
    settings.update({"sync": False})
    model = YOLO(spec["model"])
    marks: list[list[float | None]] = []

    cuda = spec["device"] != "cpu"

    def start(t: Any) -> None:
        if cuda:
            torch.cuda.synchronize()
        marks.append([time.time(), None, float(len(t.train_loader.dataset))])

    def end(t: Any) -> None:
        if cuda:
            torch.cuda.synchronize()
        marks[-1][1] = time.time()
        # written at every epoch's end: a side cut by its timeout in the closing validation of
        # best.pt (slow for an untrained segment model) keeps the epochs it timed
        doc = {"marks": marks, "accumulate": int(t.accumulate)}
        Path(spec["result"]).write_text(json.dumps(doc))

    model.add_callback("on_train_epoch_start", start)
    model.add_callback("on_train_epoch_end", end)
    model.train(
        data=spec["data"], epochs=spec["epochs"], imgsz=640, batch=spec["batch"],
        workers=spec["workers"], device=0 if cuda else "cpu", amp=cuda, deterministic=False,
        plots=False, val=False, pretrained=False, project=spec["project"], name="train",
        exist_ok=True, seed=0,
    )  # fmt: skip


def run_peer(
    args: argparse.Namespace, task: str, batch: int, data: dict[str, Any], out: Path
) -> dict[str, Any]:
    cfg = args.work / "ultralytics-config"
    (cfg / "Ultralytics").mkdir(parents=True, exist_ok=True)
    font = peer_detect._font_source(args.font)
    if font is None:
        raise FileNotFoundError("no TTF for Ultralytics' font check: pass --font FILE.ttf")
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        shutil.copyfile(font, cfg / "Ultralytics" / name)
    tag = f"peer-{task}-b{batch}"
    spec = {
        "model": f"yolo26n{peer_detect.MODEL_SUFFIX[task]}.yaml",
        "data": data["peer_yaml"],
        "epochs": args.epochs,
        "batch": batch,
        "workers": args.workers,
        "project": str(args.work / tag),
        "device": args.device,
        "result": str(out / f"{tag}.json"),
    }
    (args.work / f"{tag}-spec.json").write_text(json.dumps(spec))
    env = peer_detect._child_env(
        args.device,
        {
            "YOLO_OFFLINE": "1",
            "YOLO_AUTOINSTALL": "False",
            "YOLO_CONFIG_DIR": str(cfg),
            "MPLCONFIGDIR": str(cfg / "mpl"),
        },
    )
    cmd = [
        args.peer_python or sys.executable,
        str(Path(__file__).resolve()),
        "--peer-half",
        str(args.work / f"{tag}-spec.json"),
    ]
    with Sampler(out / f"{tag}-gpu.csv") as gpu:
        rc, wall = peer_detect._run_logged(cmd, env, out / f"{tag}.log", args.side_timeout)
    result: dict[str, Any] = {"exit": rc, "wall_s": round(wall, 1)}
    raw = out / f"{tag}.json"
    if raw.is_file():
        doc = json.loads(raw.read_text())
        marks = [m for m in doc["marks"] if m[1] is not None]
        rates = [m[2] / (m[1] - m[0]) for m in marks]
        result["epoch_img_s"] = [round(r, 1) for r in rates]
        result["img_s"] = round(statistics.fmean(rates[1:]), 1) if len(rates) > 1 else None
        result["accumulate"] = doc["accumulate"]
        if len(marks) > 1:
            result["gpu_util"] = gpu.mean_between(marks[1][0], marks[-1][1])
    return result


def loader_alone(
    args: argparse.Namespace, task: str, batch: int, data: dict[str, Any], out: Path
) -> float | None:
    """`benchmark_loader` on the same set, the default augmentation."""
    path = out / f"loader-{task}-b{batch}.json"
    per_epoch = max(data["train_images"] // batch, 1)  # the loader runs one epoch
    warmup = 2 if per_epoch > 4 else 0
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("benchmark_loader.py")),
        "--out",
        str(path),
        "--task",
        task,
        "--size",
        "640",
        "--batch",
        str(batch),
        "--workers",
        str(args.workers),
        "--copy-paste",
        "0",
        "--source",
        data["coco"],
        "--warmup",
        str(warmup),
        "--batches",
        str(per_epoch - warmup),
    ]
    log = out / f"loader-{task}-b{batch}.log"
    peer_detect._run_logged(cmd, peer_detect._child_env(args.device), log, args.side_timeout)
    if not path.is_file():
        return None
    return float(json.loads(path.read_text())["loader_img_s"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="results folder (required)")
    parser.add_argument("--tasks", default="detect,segment")
    parser.add_argument("--batches", default="16,64")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--workers", type=int, default=14)
    parser.add_argument("--device", default="0")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lucid-peer-speed"))
    parser.add_argument("--font", type=Path, default=None)
    parser.add_argument("--peer-python", default=None)
    parser.add_argument("--side-timeout", type=float, default=300.0)
    parser.add_argument("--sides", default="peer,capture,eager,loader", help="which sides to run")
    parser.add_argument("--lucid-flags", default="", help="more `lucid fit` flags, one string")
    parser.add_argument("--peer-half", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peer_half is not None:
        peer_half(args.peer_half)
        return
    if args.out is None:
        parser.error("--out is required")
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    sides = set(args.sides.split(","))
    runs = []
    for task in args.tasks.split(","):
        data = make_set(args.work, task, args.images)
        for batch in (int(b) for b in args.batches.split(",")):
            row: dict[str, Any] = {"task": task, "batch": batch, "images": data["train_images"]}
            if "peer" in sides:
                row["peer"] = run_peer(args, task, batch, data, args.out)
            if "capture" in sides:
                row["lucid"] = run_ours(args, task, batch, data, "on", args.out)
            if "eager" in sides:
                row["lucid_eager"] = run_ours(args, task, batch, data, "off", args.out)
            row["loader_img_s"] = None
            if "loader" in sides:
                row["loader_img_s"] = loader_alone(args, task, batch, data, args.out)
            row["ultralytics_img_s"] = row.get("peer", {}).get("img_s")
            row["lucid_img_s"] = row.get("lucid", {}).get("img_s")
            row["lucid_eager_img_s"] = row.get("lucid_eager", {}).get("img_s")
            row["gpu_util"] = {
                k: row.get(k, {}).get("gpu_util") for k in ("peer", "lucid", "lucid_eager")
            }
            a, b = row["lucid_img_s"], row["ultralytics_img_s"]
            row["ratio"] = round(a / b, 2) if a and b else None
            runs.append(row)
            write_results(args, runs, partial=True)  # a killed run keeps the rows it finished
            print(
                json.dumps(
                    {
                        k: row[k]
                        for k in (
                            "task",
                            "batch",
                            "ultralytics_img_s",
                            "lucid_img_s",
                            "lucid_eager_img_s",
                            "loader_img_s",
                            "ratio",
                        )
                    }
                ),
                flush=True,
            )
    write_results(args, runs, partial=False)
    print((args.out / "peer-speed.md").read_text())


def write_results(args: argparse.Namespace, runs: list[dict[str, Any]], *, partial: bool) -> None:
    """``peer-speed.json`` and ``peer-speed.md`` under ``args.out`` for the rows so far."""
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([sys.executable, *sys.argv]),
        "versions": peer_detect._versions(),
        "partial": partial,
        "runs": runs,
    }
    (args.out / "peer-speed.json").write_text(json.dumps(doc, indent=1) + "\n")
    head = ["task", "batch", "Ultralytics img/s", "lucid img/s (capture)", "lucid eager",
            "loader alone", "ratio", "GPU util % (peer / lucid / eager)"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in runs:
        u = r["gpu_util"]
        cells = [r["task"], r["batch"], r["ultralytics_img_s"], r["lucid_img_s"],
                 r["lucid_eager_img_s"], r.get("loader_img_s"), r["ratio"],
                 f"{u['peer']} / {u['lucid']} / {u['lucid_eager']}"]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    (args.out / "peer-speed.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
