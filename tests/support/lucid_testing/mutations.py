"""Run a suite once per removed rule and write which tests fail (a markdown table).

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):tests/support \
        python3 -m lucid_testing.mutations --out mutations.md              # capture, GPU
    python3 -m lucid_testing.mutations --suite train --out train.md      # trainer, CPU tests

``--suite capture`` removes the rules of lucid-capture (``LUCID_CAPTURE_MUTATION``,
tests/lucid-capture/conftest.py) over its GPU suite; ``--suite train`` the trainer's capture
rules (``LUCID_TRAIN_MUTATION``, tests/lucid-train/conftest.py) over the trainer's capture tests
that run on the CPU (``--gpu`` adds the trainer parity suite). A rule is held when at least one
test fails without it; the unmutated run must pass in full.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

RULES = [
    "rule1-live-gradients",
    "rule2-hold",
    "rule3-signatures",
    "rule4-precision",
    "rule5-warmup-hygiene",
    "rule6-unread-outputs",
    "rule7-reasons",
    "rule7-failed-capture-cleanup",
    "rule8-lifecycle",
    "rule9-gradient-layout",
]
TRAIN_RULES = [
    "train-tensor-prog-weight",
    "train-targets-by-task",
    "train-padded-eager-route",
    "train-loss-host-free",
    "train-capacity-invariant-sums",
]
TRAIN_CPU_TESTS = [
    "tests/lucid-train/test_capture_wiring.py",
    "tests/lucid-train/test_loss_capturable.py",
    "tests/lucid-train/test_loss_targets.py",
]
SUITES: dict[str, tuple[str, list[str]]] = {
    "capture": ("LUCID_CAPTURE_MUTATION", RULES),
    "train": ("LUCID_TRAIN_MUTATION", TRAIN_RULES),
}
ROOT = Path(__file__).resolve().parents[3]


def apply_mutation(
    variable: str, table: Mapping[str, Callable[[Any], None]], monkeypatch: Any
) -> str | None:
    """In a conftest's autouse fixture: remove the rule that ``$variable`` names (a monkeypatch
    from ``table``); an unknown name is a usage error, not a silent unmutated run."""
    name = os.environ.get(variable)
    if name:
        if name not in table:
            raise pytest.UsageError(f"unknown {variable} {name!r}; one of {sorted(table)}")
        table[name](monkeypatch)
    return name


def selection(suite: str, gpu: bool) -> list[str]:
    if suite == "capture":
        return ["tests/lucid-capture", "-m", "gpu"]
    if gpu:
        return [*TRAIN_CPU_TESTS, "tests/lucid-train/test_capture_trainer_gpu.py"]
    return [*TRAIN_CPU_TESTS, "-m", "not gpu"]


def run(
    variable: str, mutation: str | None, tests: list[str], extra: list[str]
) -> tuple[list[str], str]:
    env = dict(os.environ)
    env.pop(variable, None)
    if mutation:
        env[variable] = mutation
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *tests,
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
    parser.add_argument("--suite", choices=tuple(SUITES), default="capture")
    parser.add_argument("--gpu", action="store_true", help="train suite: add the GPU parity fits")
    parser.add_argument("rules", nargs="*")
    args, extra = parser.parse_known_args()
    variable, rules = SUITES[args.suite]
    tests = selection(args.suite, args.gpu)
    lines = [
        "| rule removed | tests that fail without it | pytest summary |",
        "| --- | --- | --- |",
    ]
    for rule in [None, *(args.rules or rules)]:
        start = time.time()
        failed, summary = run(variable, rule, tests, extra)
        shown = "<br>".join(f"`{f.split('::', 1)[1]}`" for f in failed[:8])
        if len(failed) > 8:
            shown += f"<br>… and {len(failed) - 8} more"
        label = rule or "none (the suite as committed)"
        lines.append(f"| {label} | {shown or '—'} ({len(failed)}) | {summary} |")
        print(f"{label}: {len(failed)} failed, {time.time() - start:.0f} s", flush=True)
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
