"""The training terms' log (`lucid_train.tasks.loss_log`) writes what Lightning's own per-batch
``self.log(on_step=True, on_epoch=True)`` wrote: the same step rows, the same epoch means."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from lucid_train.data import LucidDataModule
from lucid_train.tasks.loss_log import TrainingLossLog
from lucid_train.tasks.module import schema_arguments
from lucid_train.tasks.task_modules import module_class


def test_epoch_means_are_batch_size_weighted_and_the_items_handed_back_are_copies() -> None:
    log = TrainingLossLog()
    assert log.epoch_means() == {}
    names = ("box", "cls")
    batches = [
        (torch.tensor([1.0, 2.0]), torch.tensor(3.0), 4),
        (torch.tensor([3.0, 6.0]), torch.tensor(9.0), 2),
    ]
    for items, total, size in batches:
        got = log.add(items, total, names, size)
        assert torch.equal(got, items) and got.data_ptr() != items.data_ptr()
        items.add_(100.0)  # a replay overwrites its buffers: the log keeps what it was given
    means = log.epoch_means()
    assert set(means) == {"train/box_epoch", "train/cls_epoch", "train/loss"}
    assert means["train/box_epoch"].item() == pytest.approx((1 * 4 + 3 * 2) / 6)
    assert means["train/cls_epoch"].item() == pytest.approx((2 * 4 + 6 * 2) / 6)
    assert means["train/loss"].item() == pytest.approx((3 * 4 + 9 * 2) / 6)
    with pytest.raises(ValueError, match="changed within an epoch"):
        log.add(torch.zeros(1), torch.tensor(0.0), ("box",), 1)
    log.reset()
    assert log.epoch_means() == {} and log.last is None


def _reference_module(task: str) -> type[L.LightningModule]:
    """The module, logging every batch the way it did before, under ``ref/`` beside its own."""
    base = module_class(task)  # type: ignore[arg-type]

    class Reference(base):  # type: ignore[misc, valid-type]
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            total = super().training_step(batch, batch_idx)
            assert self.loss_log.last is not None
            bs = len(batch[0])
            for name, value in zip(self.loss_log.names, self.loss_log.last.unbind(0), strict=True):
                self.log(f"ref/{name}", value, on_step=True, on_epoch=True, batch_size=bs)
            self.log("ref/loss", total.detach(), on_step=False, on_epoch=True, batch_size=bs)
            return total

    return Reference


@pytest.mark.slow
@pytest.mark.parametrize("every", [2, 1000])
def test_the_step_rows_epoch_means_and_last_values_are_lightnings_own(
    every: int, small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """``every`` 1000: no step row is written, and the fit still ends with the last batch's
    step values (a resumed fit is compared with a straight one on them)."""
    dm = LucidDataModule(
        "detect", small_synthetic("detect"), img_size=64, batch_size=4, num_workers=0
    )
    dm.setup("fit")
    torch.manual_seed(0)
    module = _reference_module("detect")(
        model="yolo26n", img_size=64, capture="off", **schema_arguments(dm.schema)
    )
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=2,
        log_every_n_steps=every,
        logger=CSVLogger(tmp_path, name="log"),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=dm)
    rows = list(csv.DictReader(next(tmp_path.rglob("metrics.csv")).open()))
    names = module.loss_log.names
    assert names and len(names) >= 3
    step_rows = [r for r in rows if r.get(f"ref/{names[0]}_step")]
    epoch_rows = [r for r in rows if r.get("ref/loss")]
    assert len(step_rows) >= (2 if every == 2 else 0) and len(epoch_rows) == 2
    last = trainer.callback_metrics
    for name in names:
        assert f"train/{name}_step" in last, sorted(last)
        assert torch.equal(last[f"train/{name}_step"], last[f"ref/{name}_step"])
    for r in step_rows:
        for name in names:
            assert float(r[f"train/{name}_step"]) == pytest.approx(
                float(r[f"ref/{name}_step"]), rel=1e-6
            )
    for r in epoch_rows:
        assert float(r["train/loss"]) == pytest.approx(float(r["ref/loss"]), rel=1e-6)
        for name in names:
            assert float(r[f"train/{name}_epoch"]) == pytest.approx(
                float(r[f"ref/{name}_epoch"]), rel=1e-6
            )
    assert not [
        r for r in rows if r.get(f"train/{names[0]}_step") and not r.get(f"ref/{names[0]}_step")
    ]
