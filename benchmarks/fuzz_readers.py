"""The readers' property tests at scale: every reader fed ``--scale`` times CI's generated cases.

    python benchmarks/fuzz_readers.py [--scale 10] [--out docs/benchmarks/fuzz-readers.md]

Runs ``tests/lucid-train/test_data_reader_fuzz.py`` with ``LUCID_FUZZ_SCALE`` set (COCO JSON,
YOLO txt + data.yaml, DOTA labelTxt, and image files: truncated, wrong magic, flipped bytes,
huge declared sizes, every mode Pillow writes) and writes the outcome counts it prints to
``--out``. Each case must load, be refused with one line naming the file (and line), or skip and
count (the test's contract); any other exception fails it, so the table's "uncaught" column is
the failed cases: 0 when pytest passes, else the run exits 1.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/lucid-train/test_data_reader_fuzz.py"
LINE = re.compile(r"^(\w+) fuzz: (\d+) cases, (\{.*\})$")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/fuzz-readers.md")
    opts = parser.parse_args()
    env = {**os.environ, "LUCID_FUZZ_SCALE": str(opts.scale), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", TEST, "-k",
           "reader_fuzz_loads"]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    rows = [m.groups() for m in map(LINE.match, proc.stdout.splitlines()) if m]
    failed = re.findall(r"^FAILED (\S+)", proc.stdout, re.M)
    total = sum(int(n) for _, n, _ in rows)
    lines = [
        "# Reader fuzzing at scale",
        "",
        f"`python benchmarks/fuzz_readers.py --scale {opts.scale}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {TEST} with "
        f"`LUCID_FUZZ_SCALE={opts.scale}` ({opts.scale}x the cases CI runs), {wall:.0f} s "
        f"wall, one process. **{total} generated cases, {len(failed)} failed readers (an uncaught "
        "exception or a broken contract fails its reader's run).**",
        "",
        "| reader | cases | loaded | refused in one line | skipped and counted | uncaught |",
        "|---|---|---|---|---|---|",
    ]
    for reader, n, counts_text in rows:
        counts = ast.literal_eval(counts_text)
        bad = sum(reader in f for f in failed)
        lines.append(
            f"| {reader} | {n} | {counts.get('loaded', 0)} | {counts.get('refused', 0)} | "
            f"{counts.get('skipped', 0)} | {bad} |"
        )
    opts.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if proc.returncode != 0:
        print(proc.stdout[-4000:], proc.stderr[-2000:], file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
