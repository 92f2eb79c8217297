"""With CUDA the GPU tests are collected heaviest first (`heavy(weight)`, tests/conftest.py), so
xdist's load distribution starts the long fits at once on separate workers; without CUDA the
order is the files' own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = [
    "tests/lucid-kernels/test_padding.py",  # GPU cases of weight 0
    "tests/lucid-train/test_module_overfit.py",  # the goldens, heavy(4)
    "tests/e2e/test_killed_fit_resumes.py",  # the GPU chain, heavy(5)
]


def _collected(fake_cuda: bool) -> list[str]:
    code = (
        "import sys, torch, pytest\n"
        + ("torch.cuda.is_available = lambda: True\n" if fake_cuda else "")
        + "sys.exit(pytest.main(sys.argv[1:]))"
    )
    args = ["-m", "gpu", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    done = subprocess.run(
        [sys.executable, "-c", code, *args, *FILES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


@pytest.mark.slow
def test_with_cuda_the_heaviest_gpu_tests_come_first() -> None:
    ids = _collected(fake_cuda=True)
    files = [i.split("::")[0] for i in ids]
    chain, goldens = files.count(FILES[2]), files.count(FILES[1])
    assert (chain, goldens) == (5, 8)
    assert files[:chain] == [FILES[2]] * chain
    assert files[chain : chain + goldens] == [FILES[1]] * goldens
    assert set(files[chain + goldens :]) == {FILES[0]}


@pytest.mark.slow
def test_without_cuda_the_order_is_the_files_own() -> None:
    files = [i.split("::")[0] for i in _collected(fake_cuda=False)]
    assert files == sorted(files, key=FILES.index)
