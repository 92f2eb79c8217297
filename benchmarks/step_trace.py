"""A profiled training step's device time by part, from torch.profiler's Chrome trace (pure: no
device needed, so the CPU tests hold it).

The step opens a named range per part (`Parts`: ``record_function("part:<name>")``, around
calls, around a module group's forward by a pre-hook on its first module and a hook on its last,
or around a method such as the assigner's). Every kernel, copy and fill on the device is put in
the innermost part range open on the host when its launching runtime call ran (by the trace's
correlation id; kernels replayed from a CUDA graph carry their ``cudaGraphLaunch``'s). The
backward's kernels are launched from autograd's own thread, so ranges are matched by time, not
thread: the step is the only host work while it runs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

PREFIX = "part:"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# Names of the kernels that only move or re-lay data (layout transposes, dtype casts, copies)
MOVES = ("copy", "transpose", "permute", "nchwToNhwc", "nhwcToNchw", "Memcpy", "Memset", "cat")
# The host calls that put work on the device: the runtime's (ATen's kernels, copies, a graph's
# replay) and the driver's (``cuLaunchKernel*``: Triton's kernels launch through it)
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
LAUNCH_WORDS = ("LaunchKernel", "GraphLaunch", "MemcpyAsync", "MemsetAsync")


class Parts:
    """Opens and closes the profiler ranges of a step's parts (a no-op cost outside a profile)."""

    def __init__(self) -> None:
        self._open: list[Any] = []
        self.handles: list[Any] = []

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        import torch

        with torch.profiler.record_function(PREFIX + name):
            yield

    def _enter(self, name: str) -> None:
        import torch

        rf = torch.profiler.record_function(PREFIX + name)
        rf.__enter__()
        self._open.append(rf)

    def _exit(self) -> None:
        if self._open:
            self._open.pop().__exit__(None, None, None)

    def around_modules(self, name: str, first: Any, last: Any) -> None:
        """A range from ``first``'s forward start to ``last``'s forward end (modules run in
        order between them, as a backbone's layers do)."""
        self.handles.append(first.register_forward_pre_hook(lambda *_: self._enter(name)))
        self.handles.append(last.register_forward_hook(lambda *_: self._exit()))

    def around_method(self, obj: Any, attr: str, name: str) -> None:
        """A range around every call of ``obj.attr`` (set on the instance)."""
        inner: Callable[..., Any] = getattr(obj, attr)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self.part(name):
                return inner(*args, **kwargs)

        setattr(obj, attr, wrapped)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


def _innermost(ranges: list[tuple[float, float, str]], ts: float) -> str | None:
    best: tuple[float, str] | None = None
    for start, end, name in ranges:
        if start <= ts <= end and (best is None or end - start < best[0]):
            best = (end - start, name)
    return best[1] if best else None


def is_move(name: str) -> bool:
    """Whether a kernel only moves or re-lays data (see `MOVES`)."""
    low = name.lower()
    return any(m.lower() in low for m in MOVES)


def host_account(
    events: list[dict[str, Any]], ranges: list[tuple[float, float, str]], steps: int
) -> dict[str, Any]:
    """The host's side of ``steps`` profiled steps: each part range's span (ranges nest: the
    loss's holds the assigner's), the launching calls made inside each part, and every launching
    call by its API name with its host time (an eager step bound by its host spends it here and
    in the Python and dispatch around these calls)."""
    span: dict[str, float] = defaultdict(float)
    for start, end, name in ranges:
        span[name] += end - start
    by_part: dict[str, int] = defaultdict(int)
    by_api: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") not in LAUNCH_CATS or not any(w in name for w in LAUNCH_WORDS):
            continue
        by_part[_innermost(ranges, float(e["ts"])) or "other"] += 1
        row = by_api[name]
        row[0] += 1
        row[1] += float(e["dur"])
    per = 1.0 / max(steps, 1)
    return {
        "span_ms": {k: round(v * per * 1e-3, 3) for k, v in sorted(span.items())},
        "launches": {k: round(v * per, 1) for k, v in sorted(by_part.items(), key=lambda i: -i[1])},
        "launch_api": {
            k: {"calls": round(n * per, 1), "host_ms": round(us * per * 1e-3, 3)}
            for k, (n, us) in sorted(by_api.items(), key=lambda i: -i[1][0])
        },
    }


def account(trace: dict[str, Any], steps: int, top: int = 15) -> dict[str, Any]:
    """Device time per step of the ``steps`` profiled steps in ``trace`` (a Chrome trace dict):
    by part (``other``: launched outside every part range), the ``top`` kernels by time, the
    data-movement kernels, how many kernels came from CUDA graph replays, and the host's side
    (`host_account`)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    device = [e for e in events if e.get("cat") in DEVICE_CATS]
    runtime = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    ranges = [
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"][len(PREFIX) :])
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(PREFIX)
    ]
    by_part: dict[str, float] = defaultdict(float)
    by_kernel: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    graph_kernels = moves_n = 0
    moves_us = 0.0
    for e in device:
        launch = runtime.get(e.get("args", {}).get("correlation"))
        part = _innermost(ranges, float(launch["ts"])) if launch else None
        by_part[part or "other"] += float(e["dur"])
        row = by_kernel[str(e["name"])[:120]]
        row[0] += float(e["dur"])
        row[1] += 1
        if launch is not None and launch["name"].startswith("cudaGraphLaunch"):
            graph_kernels += 1
        if is_move(str(e["name"])) or e.get("cat") != "kernel":
            moves_n += 1
            moves_us += float(e["dur"])
    total = sum(by_part.values())
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in device)
    busy, end = 0.0, -1.0
    for a, b in spans:
        if b > end:
            busy += b - max(a, end)
            end = b
    ms = 1e-3 / max(steps, 1)
    kernels = sorted(by_kernel.items(), key=lambda kv: -kv[1][0])
    return {
        "steps": steps,
        "device_ms": round(total * ms, 3),
        "busy_ms": round(busy * ms, 3),  # the union of device intervals (overlap counted once)
        "parts_ms": {k: round(v * ms, 3) for k, v in sorted(by_part.items(), key=lambda i: -i[1])},
        "parts_share": {k: round(v / total, 4) if total else None for k, v in by_part.items()},
        "top_kernels": [
            {"name": name, "ms": round(us * ms, 3), "calls": round(n / max(steps, 1), 1)}
            for name, (us, n) in kernels[:top]
        ],
        "kernels_per_step": round(len(device) / max(steps, 1), 1),
        "ranges_per_step": {
            name: round(sum(r[2] == name for r in ranges) / max(steps, 1), 1)
            for name in sorted({r[2] for r in ranges})
        },
        "graph_kernels_per_step": round(graph_kernels / max(steps, 1), 1),
        "moves": {"per_step": round(moves_n / max(steps, 1), 1), "ms": round(moves_us * ms, 3)},
        "host": host_account(events, ranges, steps),
    }
