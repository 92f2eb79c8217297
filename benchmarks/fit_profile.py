"""Where a `lucid fit` batch's time goes: torch.profiler over a window of steady batches.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/fit_profile.py \\
        --out OUT --epoch 1 --start 2 --batches 12 -- fit --model yolo26n --data.root ROOT ...

With ``--peer``, the authors' trainer instead, under the same window and summary::

    python3 benchmarks/fit_profile.py --out OUT --peer --epoch 1 --start 2 --batches 8 -- \\
        model=yolo26m.yaml data=WORK/yolo-detect/data-peer.yaml epochs=2 batch=64 workers=14

Runs the ``lucid`` command given after ``--`` in this process with one more callback,
`ProfileWindow`, which profiles (CPU and CUDA activity) ``--batches`` training batches from
batch ``--start`` of epoch ``--epoch``, with Python frames unless ``--no-stack`` (they place the
host's time in the code, and inflate it). The window may run on into the next epoch, so ``--start``
a few batches before an epoch's end profiles the boundary between epochs. Writes
``OUT/trace.json.gz`` (the Chrome trace) and ``OUT/profile.md``: the window's wall time per batch,
the GPU's busy share (union of kernel, copy and set intervals over the window), device time by the
host call that launched it (``cudaGraphLaunch``: a replay) and by kernel, the host's largest ops,
every host-device wait (``cudaStreamSynchronize``, ``cudaEventSynchronize``,
``cudaDeviceSynchronize``, blocking copies) with the Python frames above it, and the longest
GPU-idle gaps with what the host ran during them.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import lightning as L
import torch

WAITS = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize")


class Window:
    """Profiles ``batches`` training batches from batch ``start`` of epoch ``epoch`` (settings
    from ``LUCID_PROFILE_*``); `tick` is called at each training batch's start, by either
    trainer's callback."""

    def __init__(self) -> None:
        self.out = Path(os.environ["LUCID_PROFILE_OUT"])
        self.epoch = int(os.environ.get("LUCID_PROFILE_EPOCH", "1"))
        self.start = int(os.environ.get("LUCID_PROFILE_START", "2"))
        self.batches = int(os.environ.get("LUCID_PROFILE_BATCHES", "12"))
        self.stack = os.environ.get("LUCID_PROFILE_STACK", "1") == "1"
        self.prof: torch.profiler.profile | None = None
        self.marks: list[float] = []

    def tick(self, epoch: int, idx: int) -> None:
        # the window counts batches across an epoch's end (`--start` near the end of an epoch
        # profiles the boundary: checkpoint, curves, the loader's next epoch)
        if self.prof is None and not self.marks and (epoch, idx) == (self.epoch, self.start):
            _sync()
            self.prof = torch.profiler.profile(
                activities=[
                    torch.profiler.ProfilerActivity.CPU,
                    torch.profiler.ProfilerActivity.CUDA,
                ],
                with_stack=self.stack,
            )
            self.prof.__enter__()
        if self.prof is not None:
            self.marks.append(time.perf_counter())
        if self.prof is not None and len(self.marks) == self.batches + 1:
            _sync()
            self.marks.append(time.perf_counter())
            self.prof.__exit__(None, None, None)
            self.out.mkdir(parents=True, exist_ok=True)
            raw = self.out / "trace.json"
            self.prof.export_chrome_trace(str(raw))
            self.prof = None
            report = summarise(json.loads(raw.read_text()), self.marks[:-1], self.batches)
            (self.out / "profile.md").write_text(report)
            print(report, flush=True)
            with raw.open("rb") as src, gzip.open(f"{raw}.gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            raw.unlink()


class ProfileWindow(L.Callback):
    """The `Window` in a `lucid fit` (added to its callbacks by `main`)."""

    def __init__(self) -> None:
        self.window = Window()

    def on_train_batch_start(self, trainer: L.Trainer, module: Any, batch: Any, idx: int) -> None:
        self.window.tick(trainer.current_epoch, idx)


def _value(key: str, text: str) -> tuple[str, Any]:
    """``key=text`` as their command line reads it: a number where it is one."""
    for kind in (int, float):
        try:
            return key, kind(text)
        except ValueError:
            pass
    return key, text


def peer_fit(overrides: list[str]) -> int:
    """The authors' trainer with the `Window` on its batch callbacks: ``overrides`` are their
    ``key=value`` arguments (``model=yolo26m.yaml data=... epochs=2 batch=64``); AMP stays on
    without fetching their check's weights, as `peer_speed.py` runs it."""
    from peer_common import offline_authors_trainer  # beside this file: `main` puts it on the path
    from ultralytics import YOLO

    offline_authors_trainer()
    kwargs = dict(_value(*item.split("=", 1)) for item in overrides)
    model = YOLO(kwargs.pop("model"))
    window, seen = Window(), {"epoch": -1, "idx": 0}

    def batch_start(t: Any) -> None:
        if t.epoch != seen["epoch"]:
            seen.update(epoch=t.epoch, idx=0)
        window.tick(t.epoch, seen["idx"])
        seen["idx"] += 1

    model.add_callback("on_train_batch_start", batch_start)
    defaults = {"amp": True, "deterministic": False, "plots": False, "val": False}
    model.train(**(defaults | kwargs), pretrained=False, exist_ok=True, seed=0)
    return 0


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _union_us(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, -1.0
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def summarise(trace: dict[str, Any], marks: list[float], batches: int) -> str:
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    host = [e for e in events if e.get("cat") == "cpu_op"]
    runtime = [e for e in events if e.get("cat") == "cuda_runtime"]
    frames = [e for e in events if e.get("cat") == "python_function"]
    lo = min(e["ts"] for e in gpu + host)
    hi = max(e["ts"] + e["dur"] for e in gpu + host)
    busy = _union_us([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    wall_ms = [(b - a) * 1e3 for a, b in itertools.pairwise(marks)]
    lines = [
        f"window: {batches} batches, {(hi - lo) / 1e3:.1f} ms traced; per batch (host marks) "
        f"{', '.join(f'{w:.1f}' for w in wall_ms)} ms",
        f"GPU busy: {busy / 1e3:.1f} ms = {100 * busy / (hi - lo):.1f} % of the window; "
        f"{busy / 1e3 / batches:.1f} ms a batch",
        "",
        "## Device time by the host call that launched it (ms a batch)",
    ]
    launcher = {e["args"].get("correlation"): e["name"] for e in runtime}
    by_launch: dict[str, float] = defaultdict(float)
    for e in gpu:
        by_launch[launcher.get(e.get("args", {}).get("correlation"), e["cat"])] += e["dur"]
    for key, us in sorted(by_launch.items(), key=lambda kv: -kv[1]):
        lines.append(f"- {key}: {us / 1e3 / batches:.2f}")
    lines += ["", "## Kernels by device time (ms a batch, calls a batch)"]
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for e in gpu:
        row = by_name[e["name"][:110]]
        row[0] += e["dur"]
        row[1] += 1
    for name, (us, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:40]:
        lines.append(f"- {us / 1e3 / batches:7.3f}  {n / batches:6.1f}  {name}")
    lines += ["", "## Host ops and CUDA runtime calls by total time, nested ones included"]
    lines += ["(ms a batch, calls a batch)"]
    by_op: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for e in host + runtime:
        row = by_op[e["name"][:110]]
        row[0] += e["dur"]
        row[1] += 1
    for name, (us, n) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:40]:
        lines.append(f"- {us / 1e3 / batches:7.3f}  {n / batches:6.1f}  {name}")

    frames.sort(key=lambda e: e["ts"])

    def stack_at(ts: float, tid: Any, depth: int = 14) -> str:
        inside = [
            f
            for f in frames
            if f.get("tid") == tid
            and f["ts"] <= ts <= f["ts"] + f["dur"]
            and "site-packages" not in f["name"]
        ]
        inside.sort(key=lambda f: -f["dur"])
        return " > ".join(f["name"].split("/")[-1][:70] for f in inside[-depth:])

    lines += ["", "## Host-device waits"]
    waits = [
        e
        for e in runtime
        if e["name"] in WAITS or ("cudaMemcpy" in e["name"] and "Async" not in e["name"])
    ]
    for e in sorted(waits, key=lambda e: -e["dur"])[:25]:
        lines.append(f"- {e['dur'] / 1e3:.2f} ms {e['name']}: {stack_at(e['ts'], e.get('tid'))}")
    lines.append(f"({len(waits)} waits in the window, {sum(e['dur'] for e in waits) / 1e3:.1f} ms)")

    lines += ["", "## Longest GPU-idle gaps and the host's longest op in each"]
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in gpu) or [(lo, lo)]
    gaps = []
    end = spans[0][1]
    for a, b in spans[1:]:
        if a > end:
            gaps.append((a - end, end, a))
        end = max(end, b)
    tops = [e for e in host if e["dur"] > 20]
    for dur, a, b in sorted(gaps, reverse=True)[:20]:
        during = [e for e in tops if e["ts"] < b and e["ts"] + e["dur"] > a]
        during.sort(key=lambda e: -min(e["ts"] + e["dur"], b) + max(e["ts"], a))
        what = during[0]["name"][:60] if during else "-"
        where = stack_at((a + b) / 2, during[0].get("tid")) if during else ""
        lines.append(f"- {dur / 1e3:.2f} ms: {what}: {where}")
    idle = sum(g[0] for g in gaps)
    long_idle = sum(g[0] for g in gaps if g[0] > 100)
    lines.append(
        f"(idle {idle / 1e3:.1f} ms in {len(gaps)} gaps; {long_idle / 1e3:.1f} ms in gaps > 0.1 ms)"
    )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--epoch", type=int, default=1)
    parser.add_argument("--start", type=int, default=2)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument(
        "--peer",
        action="store_true",
        help="profile the authors' trainer (Ultralytics) instead: its key=value arguments after --",
    )
    parser.add_argument(
        "--no-stack",
        action="store_true",
        help="no Python frames: the host's times are not inflated by tracing them, but the "
        "waits and gaps are not placed in the code",
    )
    own, lucid_args = sys.argv[1:], []
    if "--" in own:
        cut = own.index("--")
        own, lucid_args = own[:cut], own[cut + 1 :]
    args = parser.parse_args(own)
    os.environ.update(
        LUCID_PROFILE_OUT=str(args.out),
        LUCID_PROFILE_EPOCH=str(args.epoch),
        LUCID_PROFILE_START=str(args.start),
        LUCID_PROFILE_BATCHES=str(args.batches),
        LUCID_PROFILE_STACK="0" if args.no_stack else "1",
    )
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if args.peer:
        return peer_fit(lucid_args)
    from lucid_train.cli import main as lucid

    return lucid([*lucid_args, "--trainer.callbacks+=fit_profile.ProfileWindow"])


if __name__ == "__main__":
    raise SystemExit(main())
