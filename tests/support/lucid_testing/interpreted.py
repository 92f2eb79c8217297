"""Python code run under Triton's interpreter in a process of its own: the interpreter is
chosen when a kernel is defined, so a test's own process (whose imports already defined them
compiled) cannot switch. The workspace's packages go on the child's path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def run_interpreted(code: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in the repository root with ``TRITON_INTERPRET=1``."""
    packages = [str(p) for p in sorted((ROOT / "packages").glob("*/src"))]
    path = os.pathsep.join([*packages, os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
