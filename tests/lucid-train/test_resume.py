"""A run killed midway and resumed from last.ckpt ends bitwise where an uninterrupted run ends:
weights, optimizer state, schedule and EMA (CPU, deterministic)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from lucid_testing.trainer_fits import KillAtEpoch, KilledError, flat_state
from lucid_train.data import LucidDataModule
from lucid_train.optim import EMACallback
from lucid_train.run.trainer import build_trainer
from lucid_train.tasks.task_modules import DetectModule

EPOCHS = 3


def _final_state(trainer: L.Trainer, module: L.LightningModule) -> dict[str, Any]:
    ema = next(cb for cb in trainer.callbacks if isinstance(cb, EMACallback))  # type: ignore[attr-defined]
    assert ema.ema is not None
    return flat_state(
        {
            "weights": module.state_dict(),
            "optimizer": trainer.optimizers[0].state_dict(),
            "schedule": trainer.lr_scheduler_configs[0].scheduler.state_dict(),
            "ema": ema.ema.state_dict(),
            "step": trainer.global_step,
        }
    )


def _run(
    root: Path,
    run_dir: Path,
    callbacks: list[L.Callback],
    ckpt_path: Path | None = None,
    accumulate: int | str = "auto",
) -> dict[str, Any]:
    L.seed_everything(0)
    dm = LucidDataModule("detect", root, img_size=64, batch_size=4, num_workers=0)
    dm.setup("fit")
    module = DetectModule(
        "yolo26n", num_classes=dm.schema.num_classes, img_size=64, accumulate=accumulate
    )
    trainer = build_trainer(
        run_dir,
        callbacks=callbacks,
        max_epochs=EPOCHS,
        deterministic=True,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=1,
    )
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    return _final_state(trainer, module)


@pytest.mark.slow
@pytest.mark.any_torch
@pytest.mark.parametrize("accumulate", ["auto", 4])
def test_killed_and_resumed_run_ends_bitwise_like_an_uninterrupted_one(
    accumulate: int | str, small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """With 3 batches an epoch and 4 per step, the window of batches 4..7 is open when the
    run dies after epoch 1: its gradients must come back from the checkpoint (``auto``, 16 per
    step capped at the run's 9 batches, steps only at batch 0 and keeps its window open)."""
    root = small_synthetic("detect")
    straight = _run(root, tmp_path / "straight", [], accumulate=accumulate)

    with pytest.raises(KilledError):
        _run(root, tmp_path / "killed", [KillAtEpoch(2)], accumulate=accumulate)
    last = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["epoch"] == 2  # written at the start of epoch 2: two epochs done
    assert "pending_gradients" in ckpt  # both leave a window open at the epoch end
    resumed = _run(root, tmp_path / "killed", [], ckpt_path=last, accumulate=accumulate)

    assert straight.keys() == resumed.keys()
    differ = [
        k
        for k, v in straight.items()
        if not (torch.equal(v, resumed[k]) if isinstance(v, torch.Tensor) else v == resumed[k])
    ]
    assert not differ, f"resumed state differs at {differ[:5]}"
