"""Accuracy against the authors' trainer on the harder benchmark sets, both decode paths.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):/tmp/site \\
        python3 benchmarks/peer_accuracy.py --out OUT --tasks detect,segment,pose,obb --arms auto

Runs `peer_detect.py` once per (task, side): Ultralytics 8.4 and one lucid arm per
``--trainer.accumulate_grad_batches`` value, side by side (accuracy, not speed, is measured here;
each side trains in its own process with its own loader workers), on ``SyntheticSpec.hard()``
(256 train / 64 val images, sides 480-800), imgsz 320, batch 16, 20 epochs, fp16 AMP on CUDA.
Both sides are scored by one scorer on the same ground truth: pycocotools for boxes, segment
masks and pose keypoints (our OKS sigmas), our DOTA-protocol evaluator for obb. Writes
``OUT/peer-accuracy.json`` (``{"date", "rows": [...]}``), ``OUT/peer-accuracy.md`` and each
run's own folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def merge(sources: list[Path], out: Path) -> None:
    """One document of the latest comparison of each task and seed: the rows of ``sources``
    (oldest first), a (task, seed)'s rows taken from the last file that has them, each row with
    its ``source`` file and that file's ``date``; ``date`` is the newest source's."""
    latest: dict[tuple[str, int], list[dict[str, Any]]] = {}
    dates = []
    for path in sources:
        doc = json.loads(path.read_text())
        dates.append(doc["date"])
        fresh: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for row in doc["rows"]:
            fresh.setdefault((row["task"], int(row.get("seed", 0))), []).append(
                {**row, "source": path.name, "source_date": doc["date"]}
            )
        latest.update(fresh)
    order = {task: k for k, task in enumerate(("detect", "segment", "pose", "obb"))}
    rows = [row for key in sorted(latest, key=lambda k: (order[k[0]], k[1])) for row in latest[key]]
    by_task = {task for task, _ in latest}
    doc = {"date": max(dates), "command": " ".join([Path(sys.executable).name, *sys.argv]),
           "rows": rows}  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{out}: {len(rows)} rows of {', '.join(sorted(by_task))}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tasks", default="detect,segment")
    parser.add_argument("--arms", default="1,auto", help="our accumulate settings; last is judged")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4, help="loader workers per run")
    parser.add_argument("--device", default="0")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lucid-peer-accuracy"))
    parser.add_argument("--side-timeout", type=float, default=560.0)
    parser.add_argument("--seeds", default="0", help="comma list: each seed trains every side")
    parser.add_argument("--jobs", type=int, default=0, help="sides at once (0: all)")
    parser.add_argument("--peer-python", default=None, help="interpreter with Ultralytics")
    parser.add_argument(
        "--rescore",
        action="store_true",
        help="train nothing: make the validation rows of the finished runs in --out again with "
        "this checkout's code (after a change to validation), then write the tables",
    )
    parser.add_argument(
        "--tables",
        action="store_true",
        help="train nothing: write the tables of the runs that finished in --out (a call that "
        "ran out of time before the driver wrote them)",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        default=None,
        help="train nothing: write --out/peer-accuracy.json from these runs' JSONs, oldest "
        "first; a later file's rows replace an earlier one's of the same task and seed; each row "
        "names its file",
    )
    args = parser.parse_args(argv)
    if args.merge:
        merge(args.merge, args.out / "peer-accuracy.json")
        return
    tasks = [t for t in args.tasks.split(",") if t]
    arms = [a for a in args.arms.split(",") if a]
    common = ["--set", "hard", "--epochs", str(args.epochs), "--workers", str(args.workers),
              "--device", args.device, "--side-timeout", str(args.side_timeout),
              *(["--peer-python", args.peer_python] if args.peer_python else [])]  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    seeds = [int(x) for x in args.seeds.split(",") if x]
    queue: list[tuple[tuple[str, str], list[str], Path]] = []
    for task in tasks:
        sides = [("peer", ["--peer-only"])] + [
            (f"acc{a}", ["--ours-only", "--ours-accumulate", a]) for a in arms
        ]
        for seed in seeds:
            for side, flags in sides:
                name = f"{task}-{side}" + (f"-seed{seed}" if len(seeds) > 1 else "")
                cmd = [sys.executable, str(HERE / "peer_detect.py"), "--task", task, *common,
                       *flags, "--seed", str(seed), "--out", str(args.out / name),
                       "--work", str(args.work / name)]  # fmt: skip
                queue.append(((task, name), cmd, args.out / name))
    running: list[tuple[tuple[str, str], subprocess.Popen[bytes]]] = []
    if args.rescore or args.tables:
        queue = []
    if args.rescore:
        _rescore(args, tasks, arms, seeds)
    for key, cmd, out in queue:
        while args.jobs and len(running) >= args.jobs:
            done = running.pop(0)
            print(f"{done[0]}: exit {done[1].wait()}", flush=True)
        print("$ " + " ".join(cmd), flush=True)
        out.mkdir(parents=True, exist_ok=True)
        with (out / "driver.log").open("wb") as log:
            running.append((key, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)))
    for key, job in running:
        print(f"{key}: exit {job.wait()}", flush=True)
    rows: list[dict[str, Any]] = []
    tables: list[str] = []
    sys.path.insert(0, str(HERE))
    import peer_detect

    for task in tasks:
        for seed in seeds:
            tail = f"-seed{seed}" if len(seeds) > 1 else ""
            peer = _report(args.out / f"{task}-peer{tail}")
            for arm in arms:
                ours = _report(args.out / f"{task}-acc{arm}{tail}")
                if ours is None or peer is None:
                    continue
                merged = {**ours, "peer": peer.get("peer", {})}
                rows.extend(peer_detect.accuracy_rows(merged, arm))
                merged["verdict"] = peer_detect.verdict(merged, arm) or "n/a"
                tables.append(peer_detect.table(merged))
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([sys.executable, *sys.argv]),
        "wall_s": round(time.perf_counter() - start, 1),
        "rows": rows,
    }
    (args.out / "peer-accuracy.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "peer-accuracy.md").write_text("\n\n".join(tables) + "\n")
    print("\n\n".join(tables))


def _rescore(args: argparse.Namespace, tasks: list[str], arms: list[str], seeds: list[int]) -> None:
    """``--rescore``: each finished (task, seed) pair's validation rows made again in place."""
    sys.path.insert(0, str(HERE))
    import peer_detect

    for task in tasks:
        for seed in seeds:
            tail = f"-seed{seed}" if len(seeds) > 1 else ""
            peer_dir = args.out / f"{task}-peer{tail}"
            peer = _report(peer_dir)
            for arm in arms:
                ours_dir = args.out / f"{task}-acc{arm}{tail}"
                ours = _report(ours_dir)
                if ours is None or peer is None:
                    continue
                s = ours["settings"]
                side = argparse.Namespace(
                    work=args.work / ours_dir.name, device=args.device, workers=args.workers,
                    imgsz=s["imgsz"], batch=s["batch"], peer_python=args.peer_python, font=None,
                    side_timeout=args.side_timeout, ours_precision=None,
                )  # fmt: skip
                merged = peer_detect.rescore_run(
                    {**ours, "peer": peer.get("peer", {})}, side, ours_dir
                )
                ours["ours_arms"] = merged["ours_arms"]
                peer["peer"] = merged["peer"]
                (ours_dir / "peer_detect.json").write_text(json.dumps(ours, indent=1, default=str))
            if peer is not None:
                (peer_dir / "peer_detect.json").write_text(json.dumps(peer, indent=1, default=str))
                print(f"{task}{tail}: rescored", flush=True)


def _report(folder: Path) -> dict[str, Any] | None:
    path = folder / "peer_detect.json"
    return json.loads(path.read_text()) if path.is_file() else None


if __name__ == "__main__":
    main()
