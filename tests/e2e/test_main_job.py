"""The README's main job runs on a fresh interpreter and shows what the kernels guard."""

from __future__ import annotations

import subprocess
import sys


def test_kernels_demonstration_shows_the_island_keeping_attention_finite() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lucid_kernels"], capture_output=True, text=True, check=True
    ).stdout
    assert "float32 island off: NON-FINITE" in out
    assert "float32 island on : finite" in out
    assert "[(2, 17, 2), (0, 0, 2)]" in out
