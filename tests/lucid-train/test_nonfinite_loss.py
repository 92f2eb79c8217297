"""A non-finite loss stops the run, naming the step and the term, and leaves no checkpoint."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from lucid_train.data import LucidDataModule
from lucid_train.run.trainer import build_trainer
from lucid_train.tasks.nonfinite import (
    MAX_LAG,
    FiniteLossGuard,
    NonFiniteLossError,
    check_finite_loss,
)
from lucid_train.tasks.task_modules import DetectModule


def _saved_only_before(run: Path, bad_step: int) -> None:
    """No checkpoint holds the bad step or a later one (``last.ckpt`` from the epoch's start,
    before it, is the run's resume point)."""
    for path in run.rglob("*.ckpt"):
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        assert ckpt["global_step"] < bad_step, (path, ckpt["global_step"])


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


def _tiny_detect_data(small_synthetic: Callable[[str], Path]) -> LucidDataModule:
    """The built-in detect set at 64 px, batch 4, in-process loading, seeded and set up."""
    L.seed_everything(0)
    dm = LucidDataModule(
        "detect", small_synthetic("detect"), img_size=64, batch_size=4, num_workers=0
    )
    dm.setup("fit")
    return dm


def _two_epoch_trainer(run_dir: Path, callbacks: Sequence[L.Callback] = ()) -> L.Trainer:
    """A quiet two-epoch Trainer writing ``run_dir`` (so checkpoints can be looked for)."""
    return build_trainer(
        run_dir,
        max_epochs=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=1,
        callbacks=callbacks,
    )


@pytest.mark.slow
def test_injected_nan_stops_the_run_with_step_and_term_and_writes_no_checkpoint(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    dm = _tiny_detect_data(small_synthetic)
    module = _PoisonAt("yolo26n", num_classes=dm.schema.num_classes)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    trainer = _two_epoch_trainer(tmp_path)
    with pytest.raises(NonFiniteLossError) as err:
        trainer.fit(module, datamodule=dm)
    message = str(err.value)
    assert "global step 2" in message
    names = err.value.terms
    assert len(names) == 1 and names[0].startswith("o2o_")
    _saved_only_before(tmp_path, 2)
    # the weights are those of step 2: finite, and moved by the two good steps
    state = module.state_dict()
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())
    assert any(not torch.equal(before[k], state[k]) for k in before)


# -- the GPU's path (staged verdicts, a gated step), run on the CPU ---------------------------


def test_staged_check_raises_for_the_bad_batch_within_the_lag() -> None:
    guard = FiniteLossGuard(lagged=True)
    names = ("box", "cls")
    nan_cls = torch.tensor([1.0, float("inf")])
    for step in range(1 + MAX_LAG):  # the bad batch and the ones read before its verdict
        items = nan_cls if step == 1 else torch.ones(2)
        guard.observe(step, items.sum(), items, names)
    with pytest.raises(NonFiniteLossError) as err:
        guard.observe(1 + MAX_LAG, torch.tensor(2.0), torch.ones(2), names)
    assert err.value.step == 1 and err.value.terms == ("cls",)


def test_staged_check_is_read_whole_by_a_flush() -> None:
    guard = FiniteLossGuard(lagged=True)
    guard.observe(4, torch.tensor(float("nan")), torch.ones(1), ("box",))
    with pytest.raises(NonFiniteLossError, match="global step 4: total"):
        guard.flush()


def test_staged_flag_is_sticky_and_gates_every_later_step() -> None:
    guard = FiniteLossGuard(lagged=True)
    guard.flag = torch.zeros((), dtype=torch.bool)
    guard.flag.fill_(True)  # a bad batch whose staged values were already read
    with pytest.raises(RuntimeError, match="flagged"):
        guard.gate_step()
    guard.reset()
    guard.gate_step()  # a new fit starts clean


def test_flagged_gradient_makes_the_grad_scaler_skip_the_step() -> None:
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    guard = FiniteLossGuard(lagged=True)
    for bad, moved in ((False, True), (True, False)):
        before = weight.detach().clone()
        total = (weight * 2).sum()
        guard.flag = torch.tensor(bad)
        scaler.scale(total).backward()
        assert weight.grad is not None
        guard.gate_gradient(weight.grad)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        assert (not torch.equal(before, weight.detach())) is moved
    assert scaler.get_scale() == 2.0  # backed off once, as for an overflow


def test_the_flag_makes_a_fused_step_skip_itself_with_and_without_a_grad_scaler() -> None:
    """The verdict reaches torch's fused AdamW as a tensor: a flagged step leaves the weights,
    the moments and the step count as they were, and nothing is read on the host."""
    for scaled in (False, True):
        weight = torch.nn.Parameter(torch.ones(3))
        optimizer = torch.optim.AdamW([weight], lr=0.1, fused=True)
        scaler = torch.amp.GradScaler("cpu", init_scale=4.0) if scaled else None
        guard = FiniteLossGuard(lagged=True)
        for bad, moved in ((False, True), (True, False)):
            before = weight.detach().clone()
            total = (weight * 2).sum()
            guard.flag = torch.tensor(bad)
            if scaler is None:
                total.backward()
                optimizer.found_inf = guard.device_flag()  # type: ignore[attr-defined]
                optimizer.step()
            else:
                scaler.scale(total).backward()
                assert weight.grad is not None
                guard.gate_gradient(weight.grad)
                scaler.unscale_(optimizer)
                scaler.step(optimizer)
                scaler.update()
            optimizer.zero_grad()
            assert (not torch.equal(before, weight.detach())) is moved
        assert int(optimizer.state[weight]["step"]) == 1  # the skipped step is not counted


@pytest.mark.slow
@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
def test_staged_nan_stops_the_fit_before_the_bad_batch_steps_and_writes_no_checkpoint(
    small_synthetic: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fused: bool,
) -> None:
    """The staged (GPU) path on the CPU; ``fused`` builds the optimizer CUDA gets (fused AdamW:
    the verdict skips the step on the device) instead of gating the step on the host."""
    if fused:
        monkeypatch.setattr("lucid_train.tasks.recipe._on_cuda", lambda model: True)
    dm = _tiny_detect_data(small_synthetic)
    module = _PoisonAt("yolo26n", num_classes=dm.schema.num_classes, accumulate=1)
    module.finite_guard.lagged = True
    err, trainer, changed = _stopped_at_step_two(module, dm, tmp_path, "global step 2")
    assert err.terms[0].startswith("o2o_")
    assert bool(trainer.optimizers[0].defaults.get("fused")) is fused
    # the weights are those the bad batch started from: its step never ran (the forward's
    # BatchNorm statistics did move, as with the per-batch read: assumptions T64)
    assert not changed, changed[:5]


def _stopped_at_step_two(
    module: DetectModule, dm: LucidDataModule, run: Path, match: str
) -> tuple[NonFiniteLossError, L.Trainer, list[str]]:
    """Fit ``module`` until it raises `NonFiniteLossError` matching ``match`` at global step
    2; returns the error, the Trainer, and the parameters that moved from the weights that
    step started from. No checkpoint may hold step 2 or later."""
    seen: list[dict[str, torch.Tensor]] = []

    class _Weights(L.Callback):
        def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, *args: Any) -> None:
            seen.append({k: p.detach().clone() for k, p in pl_module.named_parameters()})

    trainer = _two_epoch_trainer(run, callbacks=[_Weights()])
    with pytest.raises(NonFiniteLossError, match=match) as err:
        trainer.fit(module, datamodule=dm)
    _saved_only_before(run, 2)
    changed = [k for k, p in module.named_parameters() if not torch.equal(seen[2][k], p)]
    return err.value, trainer, changed


class _InfiniteGradient(torch.autograd.Function):
    """Zero forward, infinite backward: a finite loss whose gradients overflow (what a learning
    rate far too high does after a few steps)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 0

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return torch.full_like(grad, float("inf"))


class _InfiniteGradientAt(DetectModule):
    """At one global step the loss stays finite and one weight's gradient is infinite."""

    poison_step = 2

    def compute_loss(self, output: Any, targets: Any, image_size: tuple[int, int]) -> Any:
        terms = super().compute_loss(output, targets, image_size)
        if self.global_step == self.poison_step:
            weight = next(self.parameters())
            terms.total = terms.total + _InfiniteGradient.apply(weight.sum())
        return terms


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lagged", "fused"),
    [(False, False), (True, False), (True, True)],
    ids=["host", "staged", "staged-fused"],
)
def test_infinite_gradients_from_a_finite_loss_stop_the_fit_before_the_step(
    small_synthetic: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lagged: bool,
    fused: bool,
) -> None:
    """Without a GradScaler (32-true, bf16) clipping would turn the infinite gradients into NaN
    and the step would write NaN weights into the next checkpoint; the guard reads clipping's
    total norm and stops the fit at that step, its weights untouched."""
    if fused:
        monkeypatch.setattr("lucid_train.tasks.recipe._on_cuda", lambda model: True)
    dm = _tiny_detect_data(small_synthetic)
    module = _InfiniteGradientAt("yolo26n", num_classes=dm.schema.num_classes, accumulate=1)
    module.finite_guard.lagged = lagged
    match = "non-finite gradients at global step 2"
    err, trainer, changed = _stopped_at_step_two(module, dm, tmp_path, match)
    assert err.terms == ("gradient norm",)
    assert bool(trainer.optimizers[0].defaults.get("fused")) is fused
    assert not changed, changed[:5]
    assert all(torch.isfinite(p).all() for p in module.parameters())
