"""A CUDA fit's fused kernels are compiled by the warm-up process (`KernelWarmup`), not inside its
first step: the warm-up, run as the fit starts it, leaves the fit no BatchNorm + SiLU signature
to compile, and a fit on an empty Triton cache says the warm-up ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lucid_kernels.batch_norm_act import HAVE_TRITON
from lucid_train.data.synthetic import SyntheticSpec, synthetic_dataset
from lucid_train.tasks.kernel_warmup import warmup_command

pytestmark = [pytest.mark.gpu, pytest.mark.heavy(40)]

FUSED = ("_stat_partials", "_stat_finish", "_apply_silu", "_grad_partials", "_grad_finish",
         "_grad_apply")  # fmt: skip
# 160 px: a stride-32 map of 5 x 5, warmed up at 96 px (3 x 3), so the size rule is what holds
FIT = ["--data.img_size", "160", "--data.batch_size", "4", "--data.num_workers", "0",
       "--trainer.max_epochs", "1", "--trainer.limit_val_batches", "1"]  # fmt: skip


def _compiled(cache: Path) -> set[str]:
    """The fused kernels' compiled signatures in a Triton cache (one folder each)."""
    return {p.parent.name for name in FUSED for p in cache.rglob(f"{name}.cubin")}


def _run(args: list[str], cache: Path, cwd: Path, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, check=False,
        env={**os.environ, "TRITON_CACHE_DIR": str(cache), **env}, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    return done.stdout


@pytest.mark.skipif(not HAVE_TRITON, reason="the fused pair is a set of Triton kernels")
def test_the_warm_up_leaves_the_fit_no_fused_kernel_to_compile(tmp_path: Path) -> None:
    spec = SyntheticSpec(8, 4, 96, 128)
    root = synthetic_dataset("detect", cache_dir=tmp_path / "data", spec=spec)
    classes = len(json.loads((root / "annotations" / "train.json").read_text())["categories"])
    command = warmup_command(
        "yolo26n", classes=classes, keypoints=None, batch=4, size=160, precision="16-mixed",
        device=0,
    )  # fmt: skip
    assert command is not None
    warmed = tmp_path / "warmed"
    _run(command[1:], warmed, tmp_path)
    before = _compiled(warmed)
    assert len(before) >= 6  # each fused kernel at least once
    # the fit alone, on the cache the warm-up filled: every signature it asks for is there
    fit = ["-m", "lucid_train", "fit", "--data.root", str(root), *FIT, "--run.name", "off"]
    _run(fit, warmed, tmp_path, LUCID_WARM_KERNELS="0")
    assert _compiled(warmed) == before
    # and a fit on an empty cache starts the warm-up itself
    fresh = tmp_path / "fresh"
    out = _run([*fit[:-1], "on"], fresh, tmp_path, LUCID_WARM_KERNELS="1")
    assert "the fused kernels were compiled beside the fit's start" in out
    assert _compiled(fresh) == before
