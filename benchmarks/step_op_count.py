"""Operators an eager training step dispatches, ours against the authors', by part (issue 34).

An eager step's host time grows with the operators it launches one by one: a replay removes
them, the eager side (``--model.capture off``) pays for each. This counts them on the CPU, the
step of `step_sides` (the same synthetic batch, network, loss, backward, optimizer and EMA on
both sides) run once to create the optimizer's state, then counted: every ATen operator that
reaches the dispatcher (forward and autograd's backward alike), split into views (no kernel)
and the rest, by the part that was running (`step_trace.Parts`'s ranges).

On a GPU two things differ from this count: our training ``ConvBNAct`` runs the fused BatchNorm
+ SiLU (three Triton launches each way, where the CPU runs torch's pair), and both sides run
under autocast, which adds casts. The count is the host's work in operators, not its time.

    python3 benchmarks/step_op_count.py --out OUT --tasks detect,segment --scales n,s
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from step_sides import ours_step, peer_step, synthetic_batch  # noqa: E402
from step_trace import Parts  # noqa: E402

PARTS = ("network", "backbone", "neck", "head", "loss", "assigner", "backward", "optimizer",
         "ema", "log")  # fmt: skip


class CountingParts(Parts):
    """`Parts` whose ranges also name the part an operator is counted under (the innermost)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        self.stack.append(name)
        try:
            yield
        finally:
            self.stack.pop()

    def _enter(self, name: str) -> None:
        self.stack.append(name)

    def _exit(self) -> None:
        if self.stack:
            self.stack.pop()


class OpCounter(TorchDispatchMode):
    """Counts each operator reaching the dispatcher under the part on top of ``parts``."""

    def __init__(self, parts: CountingParts) -> None:
        super().__init__()
        self.parts = parts
        self.kernels: Counter[str] = Counter()
        self.views: Counter[str] = Counter()
        self.names: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        part = self.parts.stack[-1] if self.parts.stack else "other"
        if func.is_view:
            self.views[part] += 1
        else:
            self.kernels[part] += 1
            self.names[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def count_side(side: str, task: str, scale: str, batch: int, size: int) -> dict[str, Any]:
    """One side's counted step (the second it runs)."""
    torch.manual_seed(0)
    data = synthetic_batch(batch, size, classes=3, capacity=24)
    parts = CountingParts()
    device = torch.device("cpu")
    common = {"classes": 3, "images": 1024, "epochs": 3, "parts": parts}
    if side == "lucid":
        step = ours_step(task, scale, data, device, capture=False, **common)
    else:
        step = peer_step(task, scale, data, device, **common)
    step()  # the optimizer's state is created here
    counter = OpCounter(parts)
    start = time.perf_counter()
    with counter:
        step()
    took = round(time.perf_counter() - start, 1)
    return {
        "side": side, "task": task, "scale": scale, "batch": batch, "size": size,
        "kernels": sum(counter.kernels.values()), "views": sum(counter.views.values()),
        "by_part": dict(counter.kernels), "views_by_part": dict(counter.views),
        "top": counter.names.most_common(15), "counted_step_s": took,
    }  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    head = ["task", "scale", "side", "operators (no views)", "views", *PARTS]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [r["task"], r["scale"], r["side"], r["kernels"], r["views"]]
        cells += [r["by_part"].get(p, 0) for p in PARTS]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tasks", default="detect")
    parser.add_argument("--scales", default="n")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=320, help="the count does not depend on it")
    parser.add_argument("--sides", default="lucid,ultralytics")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for task in args.tasks.split(","):
        for scale in args.scales.split(","):
            for side in args.sides.split(","):
                rows.append(count_side(side, task, scale, args.batch, args.size))
                print(json.dumps({k: rows[-1][k] for k in ("side", "task", "scale", "kernels",
                                                            "views")}), flush=True)  # fmt: skip
    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "command": " ".join([sys.executable, *sys.argv]), "torch": torch.__version__,
           "rows": rows}  # fmt: skip
    (args.out / "step-op-count.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "step-op-count.md").write_text(table(rows))
    print(table(rows))


if __name__ == "__main__":
    main()
