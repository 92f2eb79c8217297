"""Accuracy against the authors' trainer: the harder built-in sets and the held-out ones, several
seeds a side, both decode paths, the size buckets and the time to accuracy.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):/tmp/site \\
        python3 benchmarks/peer_accuracy.py --out OUT --tasks detect,segment --arms auto \\
        --sets vsynth-small,skimage-shapes --seeds 0,1,2 --jobs 8 --workers 2 --timeout 540

Runs `peer_detect.py` once per (task, set, seed, side): Ultralytics 8.4 and one lucid arm per
``--trainer.accumulate_grad_batches`` value, ``--jobs`` fits at once (accuracy, not speed, is
measured here; each side trains in its own process with its own loader workers), imgsz 320,
batch 16, 20 epochs, fp16 AMP on CUDA. Sets: ``hard`` (``SyntheticSpec.hard()``, 256 train / 64
val images, sides 480-800), ``builtin``, or a held-out set of `heldout_sets` (built into
``--set-cache`` before any fit starts; a carried cache is reused). Both sides are scored by one
scorer on the same ground truth: pycocotools for boxes, segment masks and pose keypoints (our
OKS sigmas), our DOTA-protocol evaluator for obb. Each finished side leaves its folder's
``peer_detect.json``; the tables are written again each time a side finishes, and at
``--timeout`` the fits still running are stopped and the tables made of those that finished
(``--tables`` makes them again later). Writes ``OUT/peer-accuracy.json`` (``{"date", "rows":
[...]}``: one row per (task, set, path, metric) over the seeds, `peer_seeds.seed_rows`, and the
per-seed rows under ``seed_rows``) and ``OUT/peer-accuracy.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _seed_key(row: dict[str, Any]) -> str:
    return ",".join(map(str, row["seeds"])) if "seeds" in row else str(int(row.get("seed", 0)))


def merge(sources: list[Path], out: Path) -> None:
    """One document of the latest comparison of each (task, set, seeds, epochs): the rows of
    ``sources`` (oldest first), a key's rows taken from the last file that has them, each row
    with its ``source`` file and that file's ``date``; ``date`` is the newest source's. A row of
    one seed (``seed``) and one over seeds (``seeds``) are different keys."""
    latest: dict[tuple[str, str, str, Any], list[dict[str, Any]]] = {}
    dates = []
    for path in sources:
        doc = json.loads(path.read_text())
        dates.append(doc["date"])
        fresh: dict[tuple[str, str, str, Any], list[dict[str, Any]]] = {}
        for row in doc["rows"]:
            key = (row["task"], row["set"], _seed_key(row), row.get("epochs"))
            fresh.setdefault(key, []).append(
                {**row, "source": path.name, "source_date": doc["date"]}
            )
        latest.update(fresh)
    order = {task: k for k, task in enumerate(("detect", "segment", "pose", "obb"))}
    keys = sorted(latest, key=lambda k: (order[k[0]], k[1], len(k[2]), k[2], str(k[3])))
    rows = [row for key in keys for row in latest[key]]
    by_task = {key[0] for key in latest}
    doc = {"date": max(dates), "command": " ".join([Path(sys.executable).name, *sys.argv]),
           "rows": rows}  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{out}: {len(rows)} rows of {', '.join(sorted(by_task))}")


def pool(sources: list[Path], out: Path) -> None:
    """One run's document from seeds trained in several calls: the per-seed rows
    (``seed_rows``) of ``sources`` folded over the seeds again (`peer_seeds.seed_rows`), one row
    per (task, set, path, metric, arm, epochs); a seed in two files is taken from the later. A
    size bucket or time to accuracy missing from one seed leaves that mean out (None)."""
    import peer_seeds

    per_seed: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path in sources:
        for row in json.loads(path.read_text())["seed_rows"]:
            key = (row["task"], row["set"], row["path"], row["metric"],
                   row.get("lucid_accumulate"), row.get("epochs"), int(row["seed"]))  # fmt: skip
            per_seed[key] = {**row, "source": path.name}
    seeds = list(per_seed.values())
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "sources": [p.name for p in sources],
        "rows": peer_seeds.seed_rows(seeds),
        "arm_rows": [],
        "seed_rows": seeds,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    out.with_suffix(".md").write_text(peer_seeds.seed_table(doc["rows"]) + "\n")
    print(peer_seeds.seed_table(doc["rows"]))


def run_name(task: str, set_name: str, side: str, seed: int, seeds: list[int]) -> str:
    """A side's folder. A held-out set's names its seed always (calls of different seeds can
    share one folder for ``--tables``); the harder set keeps the names of the runs before."""
    tail = f"-seed{seed}" if len(seeds) > 1 or set_name != "hard" else ""
    return f"{task}{'' if set_name == 'hard' else '-' + set_name}-{side}{tail}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tasks", default="detect,segment")
    parser.add_argument("--sets", default="hard", help="comma list: hard, builtin, held-out names")
    parser.add_argument("--set-cache", type=Path, default=None, help="held-out sets' cache")
    parser.add_argument("--arms", default="1,auto", help="our accumulate settings; last is judged")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4, help="loader workers per run")
    parser.add_argument("--device", default="0")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lucid-peer-accuracy"))
    parser.add_argument("--side-timeout", type=float, default=560.0)
    parser.add_argument(
        "--timeout", type=float, default=0.0, help="seconds: then stop the fits left, write tables"
    )
    parser.add_argument("--seeds", default="0", help="comma list: each seed trains every side")
    parser.add_argument("--jobs", type=int, default=0, help="sides at once (0: all)")
    parser.add_argument("--peer-python", default=None, help="interpreter with Ultralytics")
    parser.add_argument("--no-cross", action="store_true", help="skip ours through their validator")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="sides whose report is in --out already are not trained again: a call that goes on "
        "from an earlier one, or new arms beside the sides of a finished run",
    )
    parser.add_argument(
        "--peer-from",
        type=Path,
        nargs="+",
        default=None,
        help="train our arms only and pair each seed with the peer's values of the same task, "
        "set, path, metric and seed in these runs' JSONs (an A/B of our options against a "
        "committed peer run; the per-seed tables are left out)",
    )
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
        "first; a later file's rows replace an earlier one's of the same task, set and seeds; "
        "each row names its file",
    )
    parser.add_argument(
        "--pool",
        type=Path,
        nargs="+",
        default=None,
        help="train nothing: write --out/peer-accuracy.json from the per-seed rows of these runs' "
        "JSONs, folded over the seeds again (seeds of one arm trained in several calls)",
    )
    args = parser.parse_args(argv)
    if args.pool:
        pool(args.pool, args.out / "peer-accuracy.json")
        return
    if args.merge:
        merge(args.merge, args.out / "peer-accuracy.json")
        return
    start = time.perf_counter()
    tasks = [t for t in args.tasks.split(",") if t]
    sets = [x for x in args.sets.split(",") if x]
    arms = [a for a in args.arms.split(",") if a]
    seeds = [int(x) for x in args.seeds.split(",") if x]
    args.out.mkdir(parents=True, exist_ok=True)
    cache = args.set_cache or args.work / "heldout"
    common = ["--epochs", str(args.epochs), "--workers", str(args.workers),
              "--device", args.device, "--side-timeout", str(args.side_timeout),
              "--set-cache", str(cache), *(["--no-cross"] if args.no_cross else []),
              *(["--peer-python", args.peer_python] if args.peer_python else [])]  # fmt: skip
    queue: list[tuple[str, list[str], Path]] = []
    for task in tasks:
        for set_name in sets:
            for seed in seeds:  # a seed's sides next to each other: they finish together
                sides = [] if args.peer_from else [("peer", ["--peer-only"])]
                sides += [(f"acc{a}", ["--ours-only", "--ours-accumulate", a]) for a in arms]
                for side, flags in sides:
                    name = run_name(task, set_name, side, seed, seeds)
                    if args.keep and _report(args.out / name) is not None:
                        print(f"{name}: kept from an earlier call", flush=True)
                        continue
                    cmd = [sys.executable, str(HERE / "peer_detect.py"), "--task", task,
                           "--set", set_name, *common, *flags, "--seed", str(seed),
                           "--out", str(args.out / name),
                           "--work", str(args.work / name)]  # fmt: skip
                    queue.append((name, cmd, args.out / name))
    if args.rescore or args.tables:
        queue = []
    if args.rescore:
        _rescore(args, tasks, sets, arms, seeds)
    if queue:
        import heldout_sets

        for set_name in sets:  # built once, before the fits that read it
            if set_name in heldout_sets.BUILDERS:
                print(f"set {set_name}: {heldout_sets.build(cache, set_name)}", flush=True)
    deadline = start + args.timeout if args.timeout else None
    _run_queue(
        queue, args.jobs, deadline, lambda: _write_tables(args, tasks, sets, arms, seeds, start)
    )
    _write_tables(args, tasks, sets, arms, seeds, start, echo=True)


def _run_queue(
    queue: list[tuple[str, list[str], Path]], jobs: int, deadline: float | None, on_done: Any
) -> None:
    """Run ``queue``, ``jobs`` at once (0: all), each in its own session (a stop reaches its
    children: the fit it started); ``on_done`` after each exit. At ``deadline`` (perf_counter)
    the ones left are stopped and the ones not started skipped."""
    running: dict[str, subprocess.Popen[bytes]] = {}
    pending = list(queue)
    while pending or running:
        while pending and (not jobs or len(running) < jobs):
            name, cmd, out = pending.pop(0)
            print("$ " + " ".join(cmd), flush=True)
            out.mkdir(parents=True, exist_ok=True)
            with (out / "driver.log").open("wb") as log:
                running[name] = subprocess.Popen(
                    cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
        for name, job in list(running.items()):
            if job.poll() is not None:
                print(f"{name}: exit {job.returncode}", flush=True)
                del running[name]
                on_done()
        if deadline is not None and time.perf_counter() > deadline:
            for name, job in running.items():
                print(f"{name}: stopped at the timeout", flush=True)
                os.killpg(job.pid, signal.SIGTERM)
            for job in running.values():
                try:
                    job.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(job.pid, signal.SIGKILL)
            for name, *_ in pending:
                print(f"{name}: not started (timeout)", flush=True)
            return
        time.sleep(1.0)


def _write_tables(
    args: argparse.Namespace, tasks: list[str], sets: list[str], arms: list[str],
    seeds: list[int], start: float, echo: bool = False,
) -> None:  # fmt: skip
    """The tables of every (task, set, seed) whose sides have finished: per seed, then over the
    seeds; written to ``--out`` whole each time, so a cut call still leaves them."""
    import peer_detect
    import peer_seeds

    per_seed: list[dict[str, Any]] = []
    tables: list[str] = []
    if args.peer_from:
        per_seed = _rows_beside_committed_peer(args, tasks, sets, arms, seeds)
    for task in tasks if not args.peer_from else []:
        for set_name in sets:
            for seed in seeds:
                peer = _report(args.out / run_name(task, set_name, "peer", seed, seeds))
                for arm in arms:
                    ours = _report(args.out / run_name(task, set_name, f"acc{arm}", seed, seeds))
                    if ours is None or peer is None:
                        continue
                    merged = {**ours, "peer": peer.get("peer", {})}
                    per_seed.extend(peer_detect.accuracy_rows(merged, arm))
                    merged["verdict"] = peer_detect.verdict(merged, arm) or "n/a"
                    tables.append(peer_detect.table(merged))
    rows = peer_seeds.seed_rows([r for r in per_seed if r["lucid_accumulate"] == arms[-1]])
    # The other arms (an A/B of a data option, a fixed accumulate) over the same seeds and peer.
    arm_rows = peer_seeds.seed_rows([r for r in per_seed if r["lucid_accumulate"] != arms[-1]])
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([sys.executable, *sys.argv]),
        "wall_s": round(time.perf_counter() - start, 1),
        "rows": rows,
        "arm_rows": arm_rows,
        "seed_rows": per_seed,
    }
    (args.out / "peer-accuracy.json").write_text(json.dumps(doc, indent=1) + "\n")
    arms_text = [peer_seeds.seed_table(arm_rows)] if arm_rows else []
    text = "\n\n".join([peer_seeds.seed_table(rows), *arms_text, *tables])
    (args.out / "peer-accuracy.md").write_text(text + "\n")
    if echo:
        print(text)


def _rows_beside_committed_peer(
    args: argparse.Namespace, tasks: list[str], sets: list[str], arms: list[str], seeds: list[int]
) -> list[dict[str, Any]]:
    """``--peer-from``: each finished arm's per-seed rows with the ``ultralytics*`` values of the
    committed run's row of the same task, set, path, metric and seed (``peer_source`` names it);
    a seed the committed runs lack is left out."""
    import peer_seeds
    import peer_tables

    committed: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path in args.peer_from:
        for row in json.loads(path.read_text())["seed_rows"]:
            key = (row["task"], peer_seeds.set_name(row["set"]), row["path"], row["metric"],
                   int(row["seed"]))  # fmt: skip
            committed[key] = {**row, "source": path.name}
    rows: list[dict[str, Any]] = []
    for task, set_name, seed in ((t, x, s) for t in tasks for x in sets for s in seeds):
        for arm in arms:
            ours = _report(args.out / run_name(task, set_name, f"acc{arm}", seed, seeds))
            if ours is None:
                continue
            for row in peer_tables.accuracy_rows({**ours, "peer": {}}, arm):
                key = (row["task"], peer_seeds.set_name(row["set"]), row["path"], row["metric"],
                       int(row["seed"]))  # fmt: skip
                if key not in committed:
                    continue
                peer = committed[key]
                row.update({k: v for k, v in peer.items() if k.startswith("ultralytics")})
                row["peer_source"] = peer["source"]
                rows.append(row)
    return rows


def _rescore(
    args: argparse.Namespace, tasks: list[str], sets: list[str], arms: list[str], seeds: list[int]
) -> None:
    """``--rescore``: each finished (task, set, seed)'s validation rows made again in place."""
    import peer_detect

    for task, set_name, seed in ((t, x, s) for t in tasks for x in sets for s in seeds):
        tail = f"{set_name} seed {seed}"
        peer_dir = args.out / run_name(task, set_name, "peer", seed, seeds)
        peer = _report(peer_dir)
        for arm in arms:
            ours_dir = args.out / run_name(task, set_name, f"acc{arm}", seed, seeds)
            ours = _report(ours_dir)
            if ours is None or peer is None:
                continue
            s = ours["settings"]
            side = argparse.Namespace(
                work=args.work / ours_dir.name, device=args.device, workers=args.workers,
                imgsz=s["imgsz"], batch=s["batch"], peer_python=args.peer_python, font=None,
                side_timeout=args.side_timeout, ours_precision=None,
            )  # fmt: skip
            merged = peer_detect.rescore_run({**ours, "peer": peer.get("peer", {})}, side, ours_dir)
            ours["ours_arms"] = merged["ours_arms"]
            peer["peer"] = merged["peer"]
            (ours_dir / "peer_detect.json").write_text(json.dumps(ours, indent=1, default=str))
        if peer is not None:
            (peer_dir / "peer_detect.json").write_text(json.dumps(peer, indent=1, default=str))
            print(f"{task} {tail}: rescored", flush=True)


def _report(folder: Path) -> dict[str, Any] | None:
    path = folder / "peer_detect.json"
    return json.loads(path.read_text()) if path.is_file() else None


if __name__ == "__main__":
    main()
