"""A non-finite loss stops the run, naming the step and the term, and leaves no checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from lucid_train.data import LucidDataModule
from lucid_train.module import DetectModule
from lucid_train.nonfinite import NonFiniteLossError, check_finite_loss
from lucid_train.runs import build_trainer


def test_check_names_the_non_finite_term_and_the_step() -> None:
    items = torch.tensor([1.0, float("nan"), 2.0])
    with pytest.raises(NonFiniteLossError, match="global step 7: cls") as err:
        check_finite_loss(7, torch.tensor(float("nan")), items, ("box", "cls", "l1"))
    assert err.value.step == 7 and err.value.terms == ("cls",)


def test_check_names_the_total_when_only_the_sum_overflows() -> None:
    with pytest.raises(NonFiniteLossError, match="total") as err:
        check_finite_loss(0, torch.tensor(float("inf")), torch.ones(2), ("box", "cls"))
    assert err.value.terms == ("total",)


def test_check_passes_finite_losses() -> None:
    check_finite_loss(3, torch.tensor(1.5), torch.ones(3), ("a", "b", "c"))


class _PoisonAt(DetectModule):
    """Injects a NaN into the second logged term at one global step."""

    poison_step = 2

    def compute_loss(self, output: Any, targets: Any, image_size: tuple[int, int]) -> Any:
        terms = super().compute_loss(output, targets, image_size)
        if self.global_step == self.poison_step:
            nan = torch.tensor(float("nan"))
            terms.items = terms.items.clone()
            terms.items[1] = nan
            terms.total = terms.total + nan
        return terms


def test_injected_nan_stops_the_run_with_step_and_term_and_writes_no_checkpoint(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    L.seed_everything(0)
    dm = LucidDataModule(
        "detect", small_synthetic("detect"), img_size=64, batch_size=4, num_workers=0
    )
    dm.setup("fit")
    module = _PoisonAt("yolo26n", num_classes=dm.schema.num_classes)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    trainer = build_trainer(
        tmp_path,
        max_epochs=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=1,
    )
    with pytest.raises(NonFiniteLossError) as err:
        trainer.fit(module, datamodule=dm)
    message = str(err.value)
    assert "global step 2" in message
    names = err.value.terms
    assert len(names) == 1 and names[0].startswith("o2o_")
    assert not list(tmp_path.rglob("*.ckpt"))  # step 2 is in the first epoch: nothing saved
    # the weights are those of step 2: finite, and moved by the two good steps
    state = module.state_dict()
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())
    assert any(not torch.equal(before[k], state[k]) for k in before)
