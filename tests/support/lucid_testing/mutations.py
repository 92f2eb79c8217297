"""Run the capture GPU suite once per removed rule and write which tests fail (a markdown table).

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):tests/support \
        python3 -m lucid_testing.mutations --out mutations.md

A rule is held when at least one test fails without it; the unmutated run must pass in full.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

RULES = [
    "rule1-live-gradients",
    "rule2-hold",
    "rule3-signatures",
    "rule4-precision",
    "rule5-warmup-hygiene",
    "rule6-unread-outputs",
    "rule7-reasons",
    "rule8-lifecycle",
    "rule9-gradient-layout",
]
ROOT = Path(__file__).resolve().parents[3]


def run(mutation: str | None, extra: list[str]) -> tuple[list[str], str]:
    env = dict(os.environ)
    env.pop("LUCID_CAPTURE_MUTATION", None)
    if mutation:
        env["LUCID_CAPTURE_MUTATION"] = mutation
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "tests/lucid-capture",
        "-m",
        "gpu",
        "-q",
        "-rf",
        "-p",
        "no:cacheprovider",
        "-W",
        "ignore",
        *extra,
    ]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    failed = sorted(set(re.findall(r"^FAILED (\S+)", out.stdout, flags=re.M)))
    summary = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-300:]
    return failed, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("rules", nargs="*", default=RULES)
    args, extra = parser.parse_known_args()
    lines = [
        "| rule removed | tests that fail without it | pytest summary |",
        "| --- | --- | --- |",
    ]
    for rule in [None, *args.rules]:
        start = time.time()
        failed, summary = run(rule, extra)
        shown = "<br>".join(f"`{f.split('::', 1)[1]}`" for f in failed[:8])
        if len(failed) > 8:
            shown += f"<br>… and {len(failed) - 8} more"
        label = rule or "none (the suite as committed)"
        lines.append(f"| {label} | {shown or '—'} ({len(failed)}) | {summary} |")
        print(f"{label}: {len(failed)} failed, {time.time() - start:.0f} s", flush=True)
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
