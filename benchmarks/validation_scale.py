"""What one whole validation costs as the set grows: ``lucid validate`` of a trained checkpoint
on its COCO set's val split repeated to ``--images`` (issue 34 item 4).

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/validation_scale.py \\
        --root COCO_ROOT --ckpt last.ckpt --out OUT --images 256,5120 -- --data.num_workers 8

A fit validates every epoch, so at COCO's size (5,000 val images) its validation is part of the
time to accuracy. This times the command a user runs, both decode paths scored: for each size a
folder under ``--work`` holds the val split's images repeated (links to the same files under new
names and image ids), and ``lucid validate`` runs on it in its own process. The smaller size
carries the same start-up (imports, the model, the first batch), so the difference of two sizes
over their difference in images is the marginal cost of an image. Writes
``OUT/validation-scale.json`` and prints one line a size. Arguments after ``--`` go to
``lucid validate`` (workers, batch size, device).

Each run also carries `PhaseTimer`, a callback given by class path, which splits the validation
loop's host wall time into its parts: waiting for the next batch (the loader and the transfer),
the steps (forward, decode, the rows handed to the scorer), and the epoch's end (scoring), each
timed at a device synchronisation, so the split costs a little of the total it measures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch

HERE = Path(__file__).resolve().parent


def repeated_split(root: Path, work: Path, images: int) -> Path:
    """A COCO root under ``work`` whose val split is ``root``'s repeated to ``images`` images:
    each copy's files are symbolic links named ``r{copy}_{name}``, its image and annotation ids
    renumbered; built once a size."""
    out = work / f"val-{images}"
    doc_path = out / "annotations" / "val.json"
    if doc_path.is_file():
        return out
    source = json.loads((root / "annotations" / "val.json").read_text())
    by_image: dict[int, list[dict[str, Any]]] = {}
    for ann in source["annotations"]:
        by_image.setdefault(ann["image_id"], []).append(ann)
    (out / "images" / "val").mkdir(parents=True, exist_ok=True)
    doc_path.parent.mkdir(exist_ok=True)
    doc: dict[str, Any] = {"images": [], "annotations": [], "categories": source["categories"]}
    for n in range(images):
        copy, image = divmod(n, len(source["images"]))
        im = source["images"][image]
        name = f"r{copy}_{im['file_name']}"
        link = out / "images" / "val" / name
        if not link.exists():
            link.symlink_to((root / "images" / "val" / im["file_name"]).resolve())
        doc["images"].append({**im, "id": n + 1, "file_name": name})
        for ann in by_image.get(im["id"], []):
            doc["annotations"].append({**ann, "id": len(doc["annotations"]) + 1, "image_id": n + 1})
    doc_path.write_text(json.dumps(doc))
    return out


PHASES_ENV = "LUCID_VALIDATION_PHASES"


class PhaseTimer(L.Callback):
    """Host seconds of one validation's parts, written as JSON to ``$LUCID_VALIDATION_PHASES``:
    ``wait_s`` (from the loop's start or a step's end to the next step's start), ``step_s``
    (each step, synchronised at its end), ``end_s`` (the last step's end to the validation's
    end: scoring), ``batches``."""

    def __init__(self) -> None:
        self.mark = 0.0
        self.phases: dict[str, float] = {"wait_s": 0.0, "step_s": 0.0, "end_s": 0.0, "batches": 0}

    @staticmethod
    def _now() -> float:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter()

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.mark = self._now()

    def on_validation_batch_start(self, trainer: L.Trainer, *_: Any) -> None:
        t = self._now()
        self.phases["wait_s"] += t - self.mark
        self.mark = t

    def on_validation_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        t = self._now()
        self.phases["step_s"] += t - self.mark
        self.phases["batches"] += 1
        self.mark = t

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.phases["end_s"] += self._now() - self.mark
        target = os.environ.get(PHASES_ENV)
        if target:
            Path(target).write_text(json.dumps({k: round(v, 3) for k, v in self.phases.items()}))


def validate(root: Path, ckpt: Path, run_root: Path, extra: list[str]) -> dict[str, Any]:
    """``lucid validate`` of ``ckpt`` on ``root``: its wall seconds, the metrics it printed and
    its loop's parts (`PhaseTimer`)."""
    run_root.mkdir(parents=True, exist_ok=True)
    phases_file = run_root / "phases.json"
    phases_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "lucid_train", "validate", "--ckpt", str(ckpt),
           "--data.root", str(root), "--save_dir", str(run_root),
           "--trainer.callbacks+=validation_scale.PhaseTimer", *extra]  # fmt: skip
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])  # the callback's module
    env = {**os.environ, PHASES_ENV: str(phases_file), "PYTHONPATH": path}
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    metrics: dict[str, float] = {}
    for line in proc.stdout.splitlines():  # Lightning's table: `val/e2e/mAP50-95   0.12`
        cells = line.replace("│", " ").split()
        if len(cells) == 2 and cells[0].endswith("mAP50-95"):
            with contextlib.suppress(ValueError):  # a header row
                metrics[cells[0]] = float(cells[1])
    phases = json.loads(phases_file.read_text()) if phases_file.is_file() else None
    return {"wall_s": round(wall, 2), "metrics": metrics, "phases": phases}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="COCO root of the fit's set")
    parser.add_argument("--ckpt", type=Path, required=True, help="a lucid checkpoint")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/validation-scale"))
    parser.add_argument("--images", default="256,5120", help="comma list, smallest first")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([sys.executable, *sys.argv]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "ckpt": str(args.ckpt),
        "root": str(args.root),
        "validate_flags": extra,
        "rows": [],
    }
    for images in [int(n) for n in args.images.split(",") if n]:
        root = repeated_split(args.root, args.work, images)
        row = {"images": images, **validate(root, args.ckpt, args.work / f"runs-{images}", extra)}
        doc["rows"].append(row)
        print(json.dumps(row), flush=True)
        (args.out / "validation-scale.json").write_text(json.dumps(doc, indent=1) + "\n")
    rows = doc["rows"]
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        per_image = (last["wall_s"] - first["wall_s"]) / (last["images"] - first["images"])
        doc["marginal_ms_per_image"] = round(per_image * 1000, 3)
        print(f"marginal: {per_image * 1000:.2f} ms an image (both decode paths scored)")
        (args.out / "validation-scale.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
