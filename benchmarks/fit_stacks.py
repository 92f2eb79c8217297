"""Where a whole fit's host time goes, phase by phase: the main thread's stack sampled.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/fit_stacks.py \\
        --out OUT -- fit --model yolo26n --data.root ROOT --trainer.max_epochs 20 ...
    python3 benchmarks/fit_stacks.py --out OUT --read      # the tables again, from OUT's files

Runs the ``lucid`` command given after ``--`` in this process while a thread reads the main
thread's stack every ``--interval`` seconds (no tracing: the fit runs at its own speed, which
`fit_profile.py`'s Python frames do not allow), with ``LUCID_EPOCH_MARKS`` set
(`lucid_train.run.trainer`). Writes ``OUT/stacks.txt.gz`` (one line a sample: Unix time and the
stack, outermost first, as ``file:function`` names), ``OUT/marks.jsonl`` and ``OUT/stacks.md``:
for the launch (to the first batch) and, over the epochs after the first, for each phase of
`epoch_overhead.py` (training, validation, the rest), the share of samples in which each function
is on the stack, and the innermost frames. A host wait shows as its Python caller (a queue's
``get``, ``threading.wait``, an ``.item()``), so the table says what the main thread waits for,
not only what it computes.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import runpy
import sys
import threading
import time
from pathlib import Path

TOP = 40  # functions listed per phase


def sample(interval: float, rows: list[tuple[float, str]], stop: threading.Event) -> None:
    main = threading.main_thread().ident
    while not stop.wait(interval):
        frame = sys._current_frames().get(main)  # the one way to read another thread's stack
        names = []
        while frame is not None:
            names.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}")
            frame = frame.f_back
        rows.append((time.time(), ";".join(reversed(names))))


def windows(marks: list[dict[str, float]], start: float) -> dict[str, list[tuple[float, float]]]:
    """``{"launch": [...], "train": [...], "validate": [...], "between": [...]}`` spans in Unix
    seconds: the phases of `epoch_overhead.phases`, over the epochs after the first (as its
    medians count them), and the launch from ``start`` to the first batch."""
    spans = {m["epoch"]: m for m in marks if "start" in m}
    validated = {m["epoch"]: m["validated"] for m in marks if "validated" in m}
    out: dict[str, list[tuple[float, float]]] = {
        "launch": [(start, spans[0]["start"])] if 0 in spans else [],
        "train": [], "validate": [], "between": [],
    }  # fmt: skip
    for e in sorted(spans):
        if e == 0:
            continue
        out["train"].append((spans[e]["start"], spans[e]["end"]))
        if e in validated:
            out["validate"].append((spans[e]["end"], validated[e]))
            if e + 1 in spans:
                out["between"].append((validated[e], spans[e + 1]["start"]))
    return out


def table(rows: list[tuple[float, str]], marks: list[dict[str, float]], start: float) -> str:
    lines = []
    for name, spans in windows(marks, start).items():
        inside = [s for t, s in rows if any(a <= t < b for a, b in spans)]
        if not spans or not inside:
            continue
        each = sum(b - a for a, b in spans) / len(spans)
        on_stack: collections.Counter[str] = collections.Counter()
        leaves: collections.Counter[str] = collections.Counter()
        for stack in inside:
            frames = stack.split(";")
            on_stack.update(set(frames))
            leaves[frames[-1]] += 1
        n = len(inside)
        ranked = sorted(on_stack.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]  # ties by name
        innermost = sorted(leaves.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
        lines += [f"## {name}: {len(spans)} span(s), {each:.3f} s each, {n} samples", "",
                  "| on the stack | function |", "| --- | --- |"]  # fmt: skip
        lines += [f"| {v / n:.1%} | `{k}` |" for k, v in ranked if v < n]
        lines += ["", "Innermost: " + ", ".join(
            f"`{k}` {v / n:.0%}" for k, v in innermost), ""]  # fmt: skip
    return "\n".join(lines)


def read(out: Path) -> tuple[list[tuple[float, str]], list[dict[str, float]]]:
    with gzip.open(out / "stacks.txt.gz", "rt") as f:
        rows = [(float(t), s) for t, _, s in (line.rstrip("\n").partition(" ") for line in f)]
    marks = [json.loads(line) for line in (out / "marks.jsonl").read_text().splitlines() if line]
    return rows, marks


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=0.002, help="seconds between samples")
    parser.add_argument("--read", action="store_true", help="tabulate OUT's files, do not fit")
    args = parser.parse_args(argv[:split])
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.read:
        if split == len(argv):
            parser.error("give the lucid command after --")
        (args.out / "marks.jsonl").unlink(missing_ok=True)
        os.environ["LUCID_EPOCH_MARKS"] = str(args.out / "marks.jsonl")
        rows: list[tuple[float, str]] = []
        stop = threading.Event()
        thread = threading.Thread(target=sample, args=(args.interval, rows, stop), daemon=True)
        sys.argv = ["lucid", *argv[split + 1 :]]
        thread.start()
        try:
            runpy.run_module("lucid_train", run_name="__main__")
        except SystemExit as done:
            if done.code not in (0, None):
                print(f"fit_stacks: the fit exited {done.code}", file=sys.stderr)
        finally:
            stop.set()
            thread.join()
            with gzip.open(args.out / "stacks.txt.gz", "wt") as f:
                f.writelines(f"{t:.4f} {s}\n" for t, s in rows)
    rows, marks = read(args.out)
    text = table(rows, marks, rows[0][0] if rows else 0.0)
    (args.out / "stacks.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
