"""On CUDA a steady training batch never makes the host wait for the GPU.

torch's sync debug mode warns at every operation that synchronizes with the GPU (a host read, a
blocking copy); the warning points at the Python line that asked. From the fourth batch to the
epoch's end (data fetch, transfer, step, logging), no step may wait: the non-finite verdict
reaches the fused AdamW step on the device, from the GradScaler under 16-mixed and from the
non-finite guard under 32-true (assumptions T64, T66). Captured and eager. The CPU twin is
``test_host_reads.py``.

One sync per window is tolerated: on the H200 (2026-12-01) the 16-mixed case showed exactly one
in its window, first with capture on (13:26), then with capture off (16:02, one CPU thread per
test worker), each time attributed by torch to the ``set_sync_debug_mode`` call that closes the
window, so it was raised where no Python frame of ours was running and stays unlocated
(docs/benchmarks/peer-speed.md). The window holds at least three steps, so a sync per step
(the GradScaler's host read before the fused step, a loss read) fails this test in every case.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from lucid_train.data import LucidDataModule
from lucid_train.run.trainer import build_trainer
from lucid_train.tasks.task_modules import DetectModule

pytestmark = pytest.mark.gpu


class _SyncWindow(L.Callback):
    def __init__(self) -> None:
        self.seen: list[warnings.WarningMessage] = []
        self.steps = 0
        self._catcher: Any = None

    def _open(self) -> None:
        if self._catcher is None:
            self._catcher = warnings.catch_warnings(record=True)
            self.seen = self._catcher.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")

    def close(self) -> None:
        if self._catcher is not None:
            torch.cuda.set_sync_debug_mode("default")
            self._catcher.__exit__(None, None, None)
            self._catcher = None

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step >= 3:
            self._open()

    def on_before_optimizer_step(self, trainer: L.Trainer, *args: Any) -> None:
        if self._catcher is not None:
            self.steps += 1

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.close()


@pytest.mark.parametrize("capture", ["on", "off"])
@pytest.mark.parametrize("precision", ["16-mixed", "32-true"])
def test_steady_batches_never_wait_on_the_gpu(
    small_synthetic: Callable[[str], Path], tmp_path: Path, capture: str, precision: str
) -> None:
    L.seed_everything(0)
    dm = LucidDataModule(
        "detect", small_synthetic("detect"), img_size=64, batch_size=2, num_workers=1
    )
    dm.setup("fit")
    module = DetectModule(
        "yolo26n", num_classes=dm.schema.num_classes, capture=capture, accumulate=1
    )
    window = _SyncWindow()
    trainer = build_trainer(
        None,
        callbacks=[window],
        accelerator="cuda",
        devices=1,
        precision=precision,
        max_epochs=1,
        limit_val_batches=0,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    try:
        trainer.fit(module, datamodule=dm)
    finally:
        window.close()
    syncs = [w for w in window.seen if "synchroniz" in str(w.message)]
    places = [f"{Path(w.filename).name}:{w.lineno}" for w in syncs]
    assert window.steps >= 3
    assert len(syncs) <= 1, places
    if capture == "on":
        assert module.network_recorder.stats.replays >= window.steps
    # channels-last on CUDA (DESIGN §6): every 4-D weight
    kernels = [p for p in module.model.parameters() if p.ndim == 4]
    assert module.channels_last and kernels
    assert all(p.is_contiguous(memory_format=torch.channels_last) for p in kernels)
