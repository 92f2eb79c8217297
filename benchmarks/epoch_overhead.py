"""Where a short fit's wall time goes between its training epochs.

    python3 benchmarks/epoch_overhead.py --out OUT --runs 3 -- \\
        --data.root SET --data.img_size 320 --trainer.max_epochs 8

Runs ``lucid fit`` (the flags after ``--``) ``--runs`` times, each in a fresh process, and reads
its ``LUCID_EPOCH_MARKS`` file (`lucid_train.run.trainer`): per epoch the training (first batch
to last), the validation (last batch to the validation's end) and the rest (validation's end
to the next epoch's first batch: checkpoints, epoch hooks, the loader's first batch). On a
small set these, not the step, decide the time to accuracy (docs/benchmarks/peer-accuracy.md).
Writes ``OUT/epoch-overhead.json`` with every run's phases and their medians over the epochs
after the first (the first records graphs and warms the loader), and prints the medians.
``--marks FILE...`` reads marks files written already (a peer comparison's fits) instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def phases(marks: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per epoch ``{"epoch", "train_s", "validate_s", "between_s"}`` from a marks file's rows
    (``between_s``: to the next epoch's first batch; absent for the last epoch)."""
    spans = {m["epoch"]: m for m in marks if "start" in m}
    validated = {m["epoch"]: m["validated"] for m in marks if "validated" in m}
    out = []
    for epoch in sorted(spans):
        row = {"epoch": epoch, "train_s": spans[epoch]["end"] - spans[epoch]["start"]}
        if epoch in validated:
            row["validate_s"] = validated[epoch] - spans[epoch]["end"]
            if epoch + 1 in spans:
                row["between_s"] = spans[epoch + 1]["start"] - validated[epoch]
        out.append(row)
    return out


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each phase's median over the epochs after the first."""
    later = [r for r in rows if r["epoch"] > 0]
    keys = ("train_s", "validate_s", "between_s")
    return {k: statistics.median(r[k] for r in later if k in r) for k in keys
            if any(k in r for r in later)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--marks", type=Path, nargs="+", default=None, help="read, do not fit")
    args = parser.parse_args(argv[:split])
    fit_flags = argv[split + 1 :]
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for path in args.marks or []:
        rows = phases([json.loads(line) for line in path.read_text().splitlines() if line])
        runs.append({"marks": path.name, "epochs": rows, "medians": medians(rows)})
    for k in range(0 if args.marks else args.runs):
        marks = args.out / f"marks-{k}.jsonl"
        marks.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "lucid_train", "fit", *fit_flags,
               "--run.root", str(args.out / f"runs-{k}")]  # fmt: skip
        start = time.time()
        log = args.out / f"fit-{k}.log"
        with log.open("wb") as f:
            env = {**os.environ, "LUCID_EPOCH_MARKS": str(marks)}
            code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
        if code:
            raise SystemExit(f"run {k}: lucid fit exited {code}; its log: {log}")
        rows = phases([json.loads(line) for line in marks.read_text().splitlines() if line])
        first = json.loads(marks.read_text().splitlines()[0])["start"]
        runs.append({"wall_s": time.time() - start, "to_first_batch_s": first - start,
                     "epochs": rows, "medians": medians(rows)})  # fmt: skip
        print(f"run {k}: " + ", ".join(f"{n} {v:.3f}" for n, v in runs[-1]["medians"].items())
              + f"; first batch at {runs[-1]['to_first_batch_s']:.1f} s", flush=True)  # fmt: skip
    names = runs[0]["medians"]
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "runs": runs,
        "medians": {k: statistics.median(r["medians"][k] for r in runs) for k in names},
    }
    (args.out / "epoch-overhead.json").write_text(json.dumps(doc, indent=1) + "\n")
    print("median over runs: " + ", ".join(f"{k} {v:.3f} s" for k, v in doc["medians"].items()))


if __name__ == "__main__":
    main()
