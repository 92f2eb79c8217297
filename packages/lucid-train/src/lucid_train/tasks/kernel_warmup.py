"""The fused kernels compiled beside a fit's start, in a process of their own (opt-in for now).

A CUDA fit on a machine whose Triton cache is empty compiled every launch signature of the fused
BatchNorm + SiLU inside its first step, one after another: 5.5-7.4 s of yolo26n's first epoch
(docs/benchmarks/peer-speed.md). With ``LUCID_WARM_KERNELS=1``, `KernelWarmup` starts
``python -m lucid_models.warm_kernels`` when the fit is set up, with the fit's model, batch per
device, image size and precision; that process compiles the same signatures into Triton's cache
while this one builds its loaders and waits for its first batches. At the first training batch
the fit waits for what is left of it, then finds every kernel compiled. Nothing the fit computes
depends on it: a compiled kernel is the same whoever compiled it, and a warm-up that fails leaves
the fit to compile as before, saying why.

It starts only where Triton's cache holds none of the fused kernels yet (a fresh machine, or a
fresh ``TRITON_CACHE_DIR``): on a cache that has them, the process's own start could take longer
than the fit's way to its first batch, for nothing. A new model or batch size on such a cache
compiles its new signatures in its first step, as without the warm-up.

Off unless asked for until its GPU test (tests/lucid-train/test_kernel_warmup_gpu.py) and a
fresh-cache fit's timing have run on the GPU machine: built 2026-12-06, when no machine came.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import lightning as L

from lucid_kernels.batch_norm_act import HAVE_TRITON
from lucid_models.conv import FUSE_BN_SILU
from lucid_train.model_spec import parse_model
from lucid_train.tasks.capacity import print_once

__all__ = ["WARMUP_TIMEOUT", "KernelWarmup", "cache_holds_fused_kernels", "warmup_command"]

WARMUP_TIMEOUT = 120.0  # seconds the first batch waits at most (yolo26n: 20 compiles, 5.5-7.4 s)
DTYPE_OF_PRECISION = {"16-mixed": "float16", "bf16-mixed": "bfloat16", "32-true": "float32"}


def warmup_command(
    model: str, *, classes: int, keypoints: int | None, batch: int, size: int, precision: str,
    device: int,
) -> list[str] | None:  # fmt: skip
    """The warm-up's command line for a fit, or None where the fit runs no fused kernel:
    a precision other than mixed or float32 (a half-precision model's BatchNorm is not fused)."""
    dtype = DTYPE_OF_PRECISION.get(str(precision))
    if dtype is None:
        return None
    spec = parse_model(model)
    command = [
        sys.executable, "-m", "lucid_models.warm_kernels", "--model", spec.scale,
        "--task", spec.task, "--classes", str(classes), "--batch", str(batch),
        "--size", str(size), "--dtype", dtype, "--device", f"cuda:{device}",
    ]  # fmt: skip
    if keypoints is not None:
        command += ["--keypoints", str(keypoints)]
    return command


def cache_holds_fused_kernels() -> bool:
    """Whether Triton's cache folder holds a compiled fused BatchNorm + SiLU kernel already."""
    try:
        from triton import knobs

        folder = Path(knobs.cache.dir)
    except (ImportError, AttributeError):  # another Triton: as if fresh
        return False
    return folder.is_dir() and any(folder.glob("*/_apply_silu.*"))


class KernelWarmup(L.Callback):
    """Starts the warm-up at a CUDA fit's setup (rank 0 of a host), waits for it at the first
    training batch, and says how it went."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._started = 0.0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        device = trainer.strategy.root_device
        if (
            stage != "fit"
            or device.type != "cuda"
            or trainer.local_rank != 0
            or not (FUSE_BN_SILU and HAVE_TRITON)
            or os.environ.get("LUCID_WARM_KERNELS", "0") != "1"
            or cache_holds_fused_kernels()
        ):
            return
        data = trainer.datamodule  # type: ignore[attr-defined]
        h = pl_module.hparams
        if data is None or not hasattr(data, "img_size") or "model" not in h:
            return
        command = warmup_command(
            str(h["model"]),
            classes=int(h["num_classes"]),
            keypoints=h.get("num_keypoints"),
            batch=int(data.batch_size) // max(1, trainer.world_size),
            size=int(data.img_size),
            precision=str(trainer.precision),
            device=device.index or 0,
        )
        if command is None:
            return
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (read and closed at the first batch)
        self._started = time.perf_counter()
        self._process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._process is None:
            return
        process, self._process = self._process, None
        waited = time.perf_counter()
        try:
            code = process.wait(timeout=WARMUP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            code = None
        now = time.perf_counter()
        output = self._read_log()
        if code == 0:
            print_once(
                f"lucid: the fused kernels were compiled beside the fit's start "
                f"({now - self._started:.1f} s; the first batch waited {now - waited:.1f} s)"
            )
        else:
            why = f"ran past {WARMUP_TIMEOUT:.0f} s" if code is None else f"exited with {code}"
            tail = "\n".join(output.strip().splitlines()[-5:])
            print_once(
                f"lucid: the kernel warm-up {why}; the fit compiles its kernels itself "
                f"(unset LUCID_WARM_KERNELS to go without it). Its last lines:\n{tail}"
            )

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._process is not None:  # a fit that ended before its first batch
            self._process.kill()
            self._process.wait()
            self._process = None
        self._read_log()

    def _read_log(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        text = self._log.read().decode(errors="replace")
        self._log.close()
        self._log = None
        return text
