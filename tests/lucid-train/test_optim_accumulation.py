"""Accumulation to the nominal batch, ramped in warm-up: the authors' cadence, inside Lightning.

The reference loop below restates the authors' rule (Ultralytics 8.4 trainer, read as facts):
``accumulate = max(1, int(np.interp(ni, [0, nw], [1, nominal]).round()))`` while ``ni <= nw``,
and a step at batch ``ni`` when ``ni - last_opt_step >= accumulate``, ``last_opt_step`` carried
across epochs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import pytest
import torch

from lucid_train.data import LucidDataModule
from lucid_train.optim import AccumulationPlan, EMACallback, resolve_accumulation
from lucid_train.run.trainer import build_trainer
from lucid_train.tasks.task_modules import DetectModule


def _authors_steps(nominal: int, nb: int, epochs: int, warmup_epochs: float) -> list[int]:
    nw = round(min(warmup_epochs, max(epochs - 1, 0)) * nb)
    acc0 = min(nominal, nb * epochs)
    steps, last, accumulate = [], -1, acc0
    for epoch in range(epochs):
        for i in range(nb):
            ni = i + nb * epoch
            if nw and ni <= nw:
                accumulate = max(1, int(np.interp(ni, [0, nw], [1, acc0]).round()))
            if ni - last >= accumulate:
                steps.append(ni)
                last = ni
    return steps


def _plan_steps(plan: AccumulationPlan, epochs: int) -> list[int]:
    return [b for e in range(epochs) for b in plan.steps_in_epoch(e)]


@pytest.mark.parametrize(
    ("nominal", "nb", "epochs", "warmup"),
    [(4, 16, 20, 3.0), (4, 25, 6, 3.0), (16, 3, 5, 3.0), (8, 7, 2, 3.0), (4, 10, 1, 3.0)],
)
def test_plan_steps_where_the_authors_loop_steps(
    nominal: int, nb: int, epochs: int, warmup: float
) -> None:
    plan = AccumulationPlan.for_run(
        nominal, batches_per_epoch=nb, epochs=epochs, warmup_epochs=warmup
    )
    assert _plan_steps(plan, epochs) == _authors_steps(nominal, nb, epochs, warmup)


def test_the_issue_schedule_steps_as_the_authors() -> None:
    # 256 images at batch 16: 16 batches an epoch, 4 per step after the 48 warm-up batches.
    plan = AccumulationPlan.for_run(4, batches_per_epoch=16, epochs=20, warmup_epochs=3.0)
    ours = _plan_steps(plan, 20)
    assert ours[:12] == [0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 13, 15]
    assert [s for s in ours if s > 40][:4] == [42, 46, 50, 54] and len(ours) == 91
    assert not plan.steps_at(63) and plan.steps_at(66)  # a window across the epoch end
    # the ramp: 1, then 2 from batch 8 (1.5 rounds to even), 3 from 25 (2.5 -> 2), 4 from 40
    assert [plan.accumulate_at(b) for b in (0, 7, 8, 24, 25, 39, 40, 48, 500)] == [
        1, 1, 2, 2, 3, 3, 4, 4, 4,
    ]  # fmt: skip


def test_fixed_accumulation_is_not_ramped_and_auto_is_the_nominal_batch() -> None:
    assert resolve_accumulation("auto", 16, 64) == (4, True)
    assert resolve_accumulation("auto", 100, 64) == (1, True)
    assert resolve_accumulation(3, 16, 64) == (3, False)
    plan = AccumulationPlan.for_run(
        3, batches_per_epoch=10, epochs=4, warmup_epochs=3.0, ramped=False
    )
    assert plan.steps_in_epoch(0) == [2, 5, 8] and plan.steps_in_epoch(1) == [11, 14, 17]
    for bad in ("0", "two", -1, "1.5"):
        with pytest.raises(ValueError, match="'auto' or a positive integer"):
            resolve_accumulation(bad, 16, 64)


class _Spy(L.Callback):
    """Batches (global index) whose gradients reached the optimizer, and those that zeroed it."""

    def __init__(self) -> None:
        self.stepped: list[int] = []
        self.zeroed: list[int] = []

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self.stepped.append(trainer.global_step)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        optimizer = trainer.optimizers[0]
        zero_grad = optimizer.zero_grad

        def spy(*args: Any, **kwargs: Any) -> None:
            self.zeroed.append(trainer.global_step)
            zero_grad(*args, **kwargs)

        optimizer.zero_grad = spy


def _fit(root: Path, tmp: Path, accumulate: int | str, **trainer: Any) -> tuple[Any, ...]:
    L.seed_everything(0)
    dm = LucidDataModule("detect", root, img_size=64, batch_size=4, num_workers=0)
    dm.setup("fit")
    module = DetectModule(
        num_classes=dm.schema.num_classes, img_size=64, accumulate=accumulate, warmup_epochs=1.0
    )
    spy = _Spy()
    fit = build_trainer(
        None, callbacks=[spy], max_epochs=2, limit_val_batches=1, enable_progress_bar=False,
        enable_model_summary=False, **trainer,
    )  # fmt: skip
    fit.fit(module, datamodule=dm)
    return module, fit, spy


@pytest.mark.slow
def test_fit_steps_zeroes_and_averages_at_the_plans_batches(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    module, trainer, spy = _fit(small_synthetic("detect"), tmp_path, 2)
    plan = module.accumulation
    # 12 images at batch 4: 3 batches an epoch; the window of batches 2 and 3 spans the epoch end
    assert plan is not None and plan.nominal == 2 and not plan.ramped
    expected = _plan_steps(plan, 2)
    assert expected == [1, 3, 5]
    assert spy.stepped == expected
    assert spy.zeroed == [0, 2, 4]
    assert trainer.global_step == 6  # Lightning counts batches; the plan counts steps
    ema = next(c for c in trainer.callbacks if isinstance(c, EMACallback))
    assert ema.ema is not None and ema.ema.updates == len(expected)
    state = trainer.optimizers[0].state_dict()["state"]
    assert {int(s["step"]) for s in state.values()} == {len(expected)}


@pytest.mark.slow
def test_the_trainer_and_the_module_cannot_both_accumulate(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="leave the Trainer's at 1"):
        _fit(small_synthetic("detect"), tmp_path, "auto", accumulate_grad_batches=2)


@pytest.mark.slow
def test_an_accumulation_past_the_runs_batches_is_capped_and_the_cap_is_said(
    small_synthetic: Callable[[str], Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The authors' cap at the run's batch count (``--trainer.accumulate_grad_batches 100`` on
    a 6-batch run steps once, at its last batch). Was: "accumulation 6 (nominal batch 24)",
    the 100 asked for changed without a word."""
    with caplog.at_level(logging.INFO):
        module, _, spy = _fit(small_synthetic("detect"), tmp_path, 100)
    assert module.accumulation is not None and module.accumulation.nominal == 6
    assert spy.stepped == [5]
    assert "accumulation 6 (nominal batch 24), capped from 100 at the run's 6" in caplog.text


@pytest.mark.slow
def test_accumulated_gradients_are_summed_not_averaged(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """The module's accumulation sums batch losses as the authors do; Lightning's divides
    them by the count. Same batches, same first step: the gradients differ by that factor."""
    grads: dict[str, torch.Tensor] = {}

    class _Grab(L.Callback):
        def __init__(self, key: str) -> None:
            self.key = key

        def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
            if self.key not in grads:
                p = pl_module.model.head.one2many.box[0][0].conv.weight
                grads[self.key] = p.grad.detach().clone()

    root = small_synthetic("detect")
    for key, module_acc, trainer_acc in (("ours", 3, 1), ("lightning", 1, 3)):
        L.seed_everything(0)
        dm = LucidDataModule("detect", root, img_size=64, batch_size=4, num_workers=0)
        dm.setup("fit")
        module = DetectModule(num_classes=dm.schema.num_classes, img_size=64, accumulate=module_acc)
        build_trainer(
            None, callbacks=[_Grab(key)], max_epochs=1, limit_val_batches=0,
            accumulate_grad_batches=trainer_acc, gradient_clip_val=None,
            enable_progress_bar=False, enable_model_summary=False, deterministic=True,
        ).fit(module, datamodule=dm)  # fmt: skip
    ours, divided = grads["ours"], grads["lightning"]
    scale = float(ours.abs().max())
    torch.testing.assert_close(ours, 3 * divided, rtol=1e-4, atol=1e-4 * scale)
    assert not torch.allclose(ours, divided, rtol=0.5, atol=1e-3 * scale)
