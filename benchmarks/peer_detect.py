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
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules, when run or loaded

# The modules by job; their names stay reachable here for the scripts and tests that use them.
from heldout_sets import BUILDERS as HELDOUT
from peer_common import (
    CONF_NOTE,
    EXTRA_KIND,
    MODEL_SUFFIX,
    PATHS,
    REPO,
    _child_env,
    _last_row_with,
    _metric_prefixes,
    _run_logged,
    _versions,
)  # fmt: skip
from peer_data import export_for_peer, prepare_data
from peer_launch import _font_source, cross_validate, rescore_run, run_peer
from peer_ours import run_ours, validate_with_lucid
from peer_scoring import rescore, rescore_rotated
from peer_tables import accuracy_rows, table, verdict

__all__ = [
    "CONF_NOTE", "EXTRA_KIND", "MODEL_SUFFIX", "PATHS", "REPO", "_child_env", "_font_source",
    "_last_row_with", "_metric_prefixes", "_run_logged", "_versions", "accuracy_rows",
    "cross_validate", "export_for_peer", "prepare_data", "rescore", "rescore_rotated",
    "rescore_run", "run_ours", "run_peer", "table", "validate_with_lucid", "verdict",
]  # fmt: skip


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
        "--set",
        default="builtin",
        choices=("builtin", "hard", *HELDOUT.keys()),
        help="built-in, harder, or a held-out set of benchmarks/heldout_sets.py",
    )
    parser.add_argument(
        "--set-cache", type=Path, default=None, help="held-out sets' cache (default WORK/heldout)"
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
    if args.peer_half is not None or args.peer_validate is not None:
        from peer_side import peer_half, peer_validate_half

        if args.peer_half is not None:
            peer_half(args.peer_half)
        else:
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
    data = prepare_data(args.work, args.task, set_name=args.set, set_cache=args.set_cache)
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
