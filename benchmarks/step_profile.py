"""A kernel-level account of one training step, ours against the authors' (issue 34, item 2).

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):/tmp/site python3 benchmarks/step_profile.py \\
        --out OUT --scales n,m --tasks detect,segment --batch 64 --size 640

Per scale and task, three sides on one synthetic batch (`step_sides`; no loader): ours eager,
with a profiler range per part (backbone, neck, head, loss, assigner, backward, optimizer, EMA,
the loss log); ours replayed (network and loss from CUDA graphs, the same ranges around what the
host calls); the authors' eager step, the same parts. Each side runs ``--warmup`` steps (the
recording happens there), then ``--steps`` steps timed by CUDA events (the median: the wall
time), then ``--profiled`` steps under torch.profiler (CPU and CUDA activity) whose kernels are
put in parts (`step_trace.account`). The **step efficiency** is the sum of a step's kernel times
over its wall time. ``cudnn.benchmark`` is off by default, as both trainers leave it.

Writes ``OUT/step-profile.json`` and ``OUT/step-profile.md`` after every side.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_report import render
from step_sides import STEP_TASKS, ours_step, peer_step, synthetic_batch
from step_timing import median_step_ms
from step_trace import Parts, account

SIDES = ("ours_eager", "ours_capture", "peer")


def wall_ms(step: Callable[[], None], steps: int, device: torch.device) -> float:
    """Median milliseconds of ``steps`` steps (CUDA events on a GPU, the host clock elsewhere)."""
    if device.type == "cuda":
        return median_step_ms(step, steps)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def profile(step: Callable[[], None], steps: int, device: torch.device) -> dict[str, Any]:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    return account(trace, steps)


def measure(
    side: str, task: str, scale: str, data: dict[str, torch.Tensor], args: argparse.Namespace
) -> dict[str, Any]:
    device = torch.device(args.device)
    parts = Parts()
    common = {"classes": args.classes, "images": args.images, "epochs": args.epochs}
    torch.manual_seed(0)
    if side == "peer":
        step = peer_step(task, scale, data, device, parts=parts, **common)
    else:
        capture = side == "ours_capture"
        step = ours_step(task, scale, data, device, capture=capture, parts=parts, **common)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    module = getattr(step, "module", None)
    recorders = () if module is None else (module.network_recorder, module.loss_recorder)
    before = [r.stats.replays for r in recorders]
    ms = wall_ms(step, args.steps, device)
    result: dict[str, Any] = {"wall_ms": round(ms, 3), **getattr(step, "info", {})}
    result.update(profile(step, args.profiled, device))
    result["efficiency"] = round(result["device_ms"] / ms, 3) if ms else None
    result["busy_share"] = round(result["busy_ms"] / ms, 3) if ms else None
    if device.type == "cuda":
        result["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    if recorders:
        stats = [r.stats for r in recorders]
        result["replays"] = [s.replays for s in stats]
        if side == "ours_capture":
            # Every timed and profiled step replays network and loss, or the side is not what
            # it says (the 2026-12-03 profile's network ran eager: the harness's own hooks).
            measured = args.steps + args.profiled
            short = {
                s.name: dict(s.eager)
                for s, b in zip(stats, before, strict=True)
                if s.replays - b < measured
            }
            if short:
                result["not_replayed"] = {
                    k: {str(r): n for r, n in v.items()} for k, v in short.items()
                }
        for recorder in recorders:
            recorder.reset()
    parts.remove()
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scales", default="n,m")
    parser.add_argument("--tasks", default="detect,segment")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=640)
    parser.add_argument("--classes", type=int, default=3, help="the peer-speed set's 3 shapes")
    parser.add_argument("--capacity", type=int, default=24, help="our loss's rows an image")
    parser.add_argument("--images", type=int, default=1024, help="for optimizer=auto's rule")
    parser.add_argument("--epochs", type=int, default=3, help="for optimizer=auto's rule")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--profiled", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--cudnn-benchmark", action="store_true", help="on (both trainers: off)")
    args = parser.parse_args(argv)
    args.scales = args.scales.split(",")
    args.tasks = args.tasks.split(",")
    args.sides = args.sides.split(",")
    for task in args.tasks:
        if task not in STEP_TASKS:
            parser.error(f"--tasks: {task!r} is not one of {', '.join(STEP_TASKS)}")
    for side in args.sides:
        if side not in SIDES:
            parser.error(f"--sides: {side!r} is not one of {', '.join(SIDES)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([sys.executable, *sys.argv]),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rows": [],
    }
    for scale in args.scales:
        for task in args.tasks:
            row: dict[str, Any] = {"scale": scale, "task": task}
            doc["rows"].append(row)
            data = synthetic_batch(args.batch, args.size, args.classes, args.capacity)
            for side in args.sides:
                start = time.perf_counter()
                try:
                    row[side] = measure(side, task, scale, data, args)
                except Exception as error:  # one side failing keeps the others
                    row[side] = {"error": f"{type(error).__name__}: {error}"[:500]}
                    traceback.print_exc()
                row[side]["seconds"] = round(time.perf_counter() - start, 1)
                gc.collect()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                (args.out / "step-profile.json").write_text(json.dumps(doc, indent=1) + "\n")
                (args.out / "step-profile.md").write_text(render(doc))
                summary = {k: row[side].get(k) for k in ("wall_ms", "device_ms", "efficiency")}
                print(json.dumps({"scale": scale, "task": task, "side": side, **summary}))
    print((args.out / "step-profile.md").read_text())


if __name__ == "__main__":
    main()
