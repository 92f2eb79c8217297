"""Training speed against the authors' trainer, end to end, with GPU utilisation beside it.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):/tmp/site \\
        python3 benchmarks/peer_speed.py --out OUT --tasks detect,segment --scales n --batches 16,64

One run on the GPU machine, sides one after another (never side by side: this measures speed):

1. A 640 set of JPEGs (quality 90) of mixed sizes and aspect ratios, 1,024 train / 16 val
   images by default, for each task (detect, segment, pose, obb): the harder scenes
   (`speed_set.make_set`), in COCO layout for ours and exported to YOLO txt for the peer.
2. Per task, scale (``yolo26{n,s,m,l,x}`` and the task's suffix on both sides: ours
   ``lucid fit --model yolo26s-seg``, the peer ``yolo26s-seg.yaml``, whose scale Ultralytics
   reads from the file name) and batch: Ultralytics 8.4 (``amp=True``,
   ``deterministic=False``, ``plots=False``, ``val=False``, nominal batch 64), `lucid fit` with
   capture on and with capture off (16-mixed, accumulation ``auto`` = the same nominal batch,
   no validation), and the loader alone (`benchmark_loader`). Train-only images/s of the steady
   epochs (2 to the last, 0-based epoch 0 excluded): ours from ``time/train_images_per_s`` in
   metrics.csv, the peer's from per-epoch callbacks synchronised with the device. A row whose
   side runs out of device memory runs again at half the batch (`speed_rows`).
3. ``nvidia-smi`` samples utilisation every 250 ms during each side; the mean over the side's
   steady epochs is reported.

Writes ``OUT/peer-speed.json`` (``{"date", "runs": [{"task", "scale", "batch", "batch_used",
"ultralytics_img_s", "lucid_img_s", "lucid_eager_img_s", "loader_img_s", "gpu_util", "ratio",
...}]}``) and ``OUT/peer-speed.md``, after every row (a killed run keeps the rows it finished).
Rows merge into an ``OUT/peer-speed.json`` already there, keyed by (task, scale, batch), so
each row may run in a device call of its own; ``--fresh`` starts a new file.

``--step-profile PROFILE`` trains nothing: it puts the step efficiencies of a `step_profile.py`
JSON (kernel time over wall time of one step, ours replayed and eager, theirs) into
``OUT/peer-speed.json`` as ``step_efficiency`` rows keyed by (task, scale), beside the runs.
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
from peer_common import (  # noqa: E402
    MODEL_SUFFIX,
    _child_env,
    _run_logged,
    _versions,
    offline_authors_trainer,
)
from peer_launch import _font_source  # noqa: E402
from speed_rows import (  # noqa: E402
    merge_rows,
    next_batch,
    peer_reduced_batch,
    pipeline_line,
    ran_out_of_memory,
    summarise_row,
    table,
)
from speed_set import make_set  # noqa: E402


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
    args: argparse.Namespace,
    task: str,
    scale: str,
    batch: int,
    data: dict[str, Any],
    capture: str,
    out: Path,
    repeat: int = 0,
) -> dict[str, Any]:
    again = f"-r{repeat}" if repeat else ""  # a repeat's own files (`--repeats`)
    runs = args.work / f"ours-{task}-{scale}-{batch}-{capture}{again}"
    if runs.exists():
        shutil.rmtree(runs)
    cmd = [
        sys.executable,
        "-m",
        "lucid_train",
        "fit",
        "--model",
        f"yolo26{scale}{MODEL_SUFFIX[task]}",
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
    tag = f"ours-{task}-{scale}-b{batch}-{capture}{again}"
    marks_file = out / f"{tag}-epochs.jsonl"
    marks_file.unlink(missing_ok=True)
    env = _child_env(args.device, {"LUCID_EPOCH_MARKS": str(marks_file)})
    with Sampler(out / f"{tag}-gpu.csv") as gpu:
        rc, wall = _run_logged(cmd, env, out / f"{tag}.log", args.side_timeout)
    result: dict[str, Any] = {"command": " ".join(cmd), "exit": rc, "wall_s": round(wall, 1)}
    result["out_of_memory"] = ran_out_of_memory(out / f"{tag}.log")
    result["pipeline"] = pipeline_line(out / f"{tag}.log")  # the renderer `auto` took, and why
    metrics = runs / task / "train" / "metrics.csv"
    if metrics.is_file():
        rows = [r for r in csv.DictReader(metrics.open()) if r.get("time/train_images_per_s")]
        steady = [float(r["time/train_images_per_s"]) for r in rows if int(float(r["epoch"])) >= 1]
        result["epoch_img_s"] = [round(float(r["time/train_images_per_s"]), 1) for r in rows]
        result["img_s"] = round(statistics.fmean(steady), 1) if steady else None
        # GPU utilisation over the steady epochs' own windows (first batch to last, as timed)
        lines = marks_file.read_text().splitlines() if marks_file.is_file() else []
        steady_marks = [m for m in map(json.loads, lines) if "start" in m and m["epoch"] >= 1]
        if steady_marks:
            result["gpu_util"] = gpu.mean_between(steady_marks[0]["start"], steady_marks[-1]["end"])
    return result


def peer_half(spec_path: Path) -> None:
    """The Ultralytics side, in its own process: train and time each epoch, synchronised."""
    spec = json.loads(spec_path.read_text())
    import torch
    from ultralytics import YOLO

    offline_authors_trainer()
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
    args: argparse.Namespace,
    task: str,
    scale: str,
    batch: int,
    data: dict[str, Any],
    out: Path,
    repeat: int = 0,
) -> dict[str, Any]:
    cfg = args.work / "ultralytics-config"
    (cfg / "Ultralytics").mkdir(parents=True, exist_ok=True)
    font = _font_source(args.font)
    if font is None:
        raise FileNotFoundError("no TTF for Ultralytics' font check: pass --font FILE.ttf")
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        shutil.copyfile(font, cfg / "Ultralytics" / name)
    tag = f"peer-{task}-{scale}-b{batch}" + (f"-r{repeat}" if repeat else "")
    spec = {
        "model": f"yolo26{scale}{MODEL_SUFFIX[task]}.yaml",
        "data": data["peer_yaml"],
        "epochs": args.epochs,
        "batch": batch,
        "workers": args.workers,
        "project": str(args.work / tag),
        "device": args.device,
        "result": str(out / f"{tag}.json"),
    }
    (args.work / f"{tag}-spec.json").write_text(json.dumps(spec))
    env = _child_env(
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
        rc, wall = _run_logged(cmd, env, out / f"{tag}.log", args.side_timeout)
    result: dict[str, Any] = {"exit": rc, "wall_s": round(wall, 1)}
    result["batch_reduced_to"] = peer_reduced_batch(out / f"{tag}.log")
    # the peer halves its own batch on a first-epoch OOM; a later one (or a third) ends it
    result["out_of_memory"] = rc != 0 and ran_out_of_memory(out / f"{tag}.log")
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
    args: argparse.Namespace, task: str, scale: str, batch: int, data: dict[str, Any], out: Path
) -> float | None:
    """`benchmark_loader` on the same set with the fit's data defaults: the default
    augmentation, the partner pool and load-time resize, and the renderer ``--data.render
    auto`` takes for ``scale`` (no model), timed over the fit's epochs (1 .. N-1). Until
    2026-12-06 it timed one epoch's batches after two, mostly the workers' first batches."""
    path = out / f"loader-{task}-{scale}-b{batch}.json"
    if path.is_file():
        return float(json.loads(path.read_text())["loader_img_s"])
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
        "--variant",
        scale,
        "--epochs",  # the fit's window: epochs 1 .. N-1, the workers persisting across them
        str(max(args.epochs, 2)),
    ]
    log = out / f"loader-{task}-{scale}-b{batch}.log"
    _run_logged(cmd, _child_env(args.device), log, args.side_timeout)
    if not path.is_file():
        return None
    return float(json.loads(path.read_text())["loader_img_s"])


def _sides_once(
    args: argparse.Namespace,
    sides: set[str],
    task: str,
    scale: str,
    batch: int,
    data: dict[str, Any],
    repeat: int = 0,
) -> dict[str, dict[str, Any]]:
    """One run of each side asked for, in the row's order: peer, capture, eager."""
    out: dict[str, dict[str, Any]] = {}
    if "peer" in sides:
        out["peer"] = run_peer(args, task, scale, batch, data, args.out, repeat)
    if "capture" in sides:
        out["lucid"] = run_ours(args, task, scale, batch, data, "on", args.out, repeat)
    if "eager" in sides:
        out["lucid_eager"] = run_ours(args, task, scale, batch, data, "off", args.out, repeat)
    return out


def run_row(
    args: argparse.Namespace, task: str, scale: str, batch: int, data: dict[str, Any]
) -> dict[str, Any]:
    """One row: every side asked for at ``batch``; a side out of device memory makes the whole
    row run again at the next smaller batch (`speed_rows.next_batch`). With ``--repeats N``
    the sides run N times in turn at the batch that ran (`speed_rows.summarise_row`)."""
    sides = set(args.sides.split(","))
    used: int | None = batch
    tried = []
    while used is not None:
        row: dict[str, Any] = {"task": task, "scale": scale, "batch": batch, "batch_used": used}
        row["images"] = data["train_images"]
        row.update(_sides_once(args, sides, task, scale, used, data))
        tried.append(used)
        if not any(row.get(k, {}).get("out_of_memory") for k in ("peer", "lucid", "lucid_eager")):
            break
        used = next_batch(used)
    row["batches_tried"] = tried
    if args.repeats > 1:
        row["repeats"] = {k: [row[k]] for k in ("peer", "lucid", "lucid_eager") if k in row}
        for repeat in range(1, args.repeats):
            again = _sides_once(args, sides, task, scale, row["batch_used"], data, repeat)
            for side, result in again.items():
                row["repeats"][side].append(result)
    if "loader" in sides:
        row["loader_img_s"] = loader_alone(args, task, scale, row["batch_used"], data, args.out)
    return summarise_row(row)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="results folder (required)")
    parser.add_argument("--tasks", default="detect,segment", help="of detect,segment,pose,obb")
    parser.add_argument("--scales", default="n", help="of n,s,m,l,x")
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
    parser.add_argument(
        "--repeats", type=int, default=1,
        help="run the sides in turn this many times a row; the row reads each side's median",
    )  # fmt: skip
    parser.add_argument("--lucid-flags", default="", help="more `lucid fit` flags, one string")
    parser.add_argument("--fresh", action="store_true", help="replace OUT/peer-speed.json")
    parser.add_argument(
        "--step-profile", type=Path, default=None, help="train nothing: attach its efficiencies"
    )
    parser.add_argument("--peer-half", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peer_half is None and args.out is None:
        parser.error("--out is required")
    args.tasks = args.tasks.split(",")
    args.scales = args.scales.split(",")
    args.batches = [int(b) for b in args.batches.split(",")]
    for task in args.tasks:
        if task not in MODEL_SUFFIX:
            parser.error(f"--tasks: {task!r} is not one of {', '.join(MODEL_SUFFIX)}")
    for scale in args.scales:
        if scale not in ("n", "s", "m", "l", "x"):
            parser.error(f"--scales: {scale!r} is not one of n,s,m,l,x")
    if args.repeats < 1:
        parser.error(f"--repeats: at least 1, got {args.repeats}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.peer_half is not None:
        peer_half(args.peer_half)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    if args.step_profile is not None:
        attach_step_profile(args.out / "peer-speed.json", args.step_profile)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    old = [] if args.fresh else read_rows(args.out / "peer-speed.json")
    runs: list[dict[str, Any]] = []
    stamp = _stamp()
    for task in args.tasks:
        data = make_set(args.work, task, args.images)
        for scale in args.scales:
            for batch in args.batches:
                row = {**run_row(args, task, scale, batch, data), "measured": stamp}
                runs.append(row)
                write_results(args.out, merge_rows(old, runs), partial=True)
                keys = ("task", "scale", "batch", "batch_used", "ultralytics_img_s",
                        "lucid_img_s", "lucid_eager_img_s", "loader_img_s", "ratio")  # fmt: skip
                print(json.dumps({k: row.get(k) for k in keys}), flush=True)
    write_results(args.out, merge_rows(old, runs), partial=False)
    print((args.out / "peer-speed.md").read_text())


def _stamp() -> dict[str, Any]:
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([sys.executable, *sys.argv]),
        "versions": _versions(),
    }


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of an existing ``peer-speed.json`` (none if there is no file), each with the
    ``measured`` stamp (date, command, versions) of the call that measured it."""
    if not path.is_file():
        return []
    doc = json.loads(path.read_text())
    stamp = {k: doc.get(k) for k in ("date", "command", "versions")}
    return [{**row, "measured": row.get("measured", stamp)} for row in doc["runs"]]


def attach_step_profile(path: Path, profile: Path) -> None:
    """``step_efficiency`` rows of ``path`` (a ``peer-speed.json``) from a `step_profile.py`
    JSON, one per (task, scale), replacing that key's earlier row; the runs stay as they are."""
    doc = json.loads(path.read_text())
    measured = json.loads(profile.read_text())
    rows = {(r["task"], r["scale"]): r for r in doc.get("step_efficiency", [])}
    for r in measured["rows"]:
        replayed = r.get("ours_capture", {})
        if "efficiency" not in replayed:
            continue
        rows[(r["task"], r["scale"])] = {
            "task": r["task"], "scale": r["scale"], "batch": measured["settings"]["batch"],
            "size": measured["settings"]["size"],
            "lucid": replayed["efficiency"],
            "lucid_eager": r.get("ours_eager", {}).get("efficiency"),
            "ultralytics": r.get("peer", {}).get("efficiency"),
            "lucid_replays": replayed.get("replays"),
            "not_replayed": replayed.get("not_replayed"),
            "device": measured["device"], "date": measured["date"], "source": profile.name,
        }  # fmt: skip
    doc["step_efficiency"] = sorted(rows.values(), key=lambda e: (e["task"], e["scale"]))
    path.write_text(json.dumps(doc, indent=1) + "\n")


def write_results(out: Path, runs: list[dict[str, Any]], *, partial: bool) -> None:
    """``peer-speed.json`` and ``peer-speed.md`` under ``out`` for every row so far (the merged
    ones included); each row's ``measured`` says which call measured it. Attached
    ``step_efficiency`` rows stay."""
    path = out / "peer-speed.json"
    kept = json.loads(path.read_text()).get("step_efficiency") if path.is_file() else None
    doc = {**_stamp(), "partial": partial, "runs": runs}
    if kept:
        doc["step_efficiency"] = kept
    (out / "peer-speed.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "peer-speed.md").write_text(table(runs))


if __name__ == "__main__":
    main()
