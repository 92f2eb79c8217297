"""MuSGD, the per-step schedule and EMACallback inside a tiny Lightning fit on CPU.

9 batches per epoch with ``accumulate_grad_batches=2`` make 5 optimizer steps per epoch, the last
one on a partial accumulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
from torch import Tensor, nn
from torch.amp.grad_scaler import GradScaler
from torch.utils.data import DataLoader, TensorDataset

from lucid_train.optim import (
    EMACallback,
    ModelEMA,
    MuSGD,
    WarmupLinear,
    WarmupLinearLR,
    ema_state_dict,
    param_groups,
)

pytestmark = pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")

BATCHES, BATCH, ACCUMULATE, EPOCHS = 9, 4, 2, 2
STEPS_PER_EPOCH = 5


@dataclass
class Record:
    """What the tiny module saw."""

    lrs: list[tuple[int, list[float], list[float]]] = field(default_factory=list)
    validation_saw_ema: list[bool] = field(default_factory=list)
    last_live: dict[str, Tensor] = field(default_factory=dict)


class Tiny(pl.LightningModule):
    def __init__(
        self, fail_validation_in_epoch: int | None = None, save_in_validation: Path | None = None
    ):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.net = nn.Sequential(
                nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.SiLU(), nn.Flatten(), nn.Linear(16, 2)
            )
        self.record = Record()
        self.fail_validation_in_epoch = fail_validation_in_epoch
        self.save_in_validation = save_in_validation

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.net(x)
        return out

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.record.last_live = {k: v.clone() for k, v in self.state_dict().items()}

    def validation_step(self, batch: list[Tensor], batch_idx: int) -> None:
        if self.fail_validation_in_epoch == self.current_epoch:
            raise RuntimeError("validation failed")
        ema = _ema_callback(self.trainer).ema
        assert ema is not None
        self.record.validation_saw_ema.append(
            all(torch.equal(v, ema.shadow[k]) for k, v in self.state_dict().items())
        )
        if self.save_in_validation is not None and batch_idx == 0:
            self.trainer.save_checkpoint(self.save_in_validation)

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        groups = param_groups(self, batch_size=BATCH, accumulate=ACCUMULATE)
        optimizer = MuSGD(groups)
        epochs = self.trainer.max_epochs
        assert epochs is not None
        steps = int(self.trainer.estimated_stepping_batches) // epochs  # optimizer steps per epoch
        schedule = WarmupLinear(steps, epochs, warmup_epochs=1.0)
        scheduler = WarmupLinearLR(optimizer, schedule)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        groups = optimizer.param_groups
        self.record.lrs.append(
            (self.trainer.global_step, [g["lr"] for g in groups], [g["momentum"] for g in groups])
        )


def _ema_callback(trainer: pl.Trainer) -> EMACallback:
    return next(c for c in trainer.callbacks if isinstance(c, EMACallback))  # type: ignore[attr-defined]


def _loader(n: int, seed: int) -> DataLoader[tuple[Tensor, ...]]:
    gen = torch.Generator().manual_seed(seed)
    data = TensorDataset(
        torch.randn(n * BATCH, 3, 4, 4, generator=gen), torch.randn(n * BATCH, 2, generator=gen)
    )
    return DataLoader(data, batch_size=BATCH, shuffle=False)


def _trainer(
    tmp: Path,
    *,
    ema: bool = True,
    checkpoints: bool = False,
    epochs: int = EPOCHS,
    plugins: list[Any] | None = None,
) -> pl.Trainer:
    callbacks: list[pl.Callback] = [EMACallback(tau=5.0)] if ema else []
    if checkpoints:
        callbacks.append(
            ModelCheckpoint(dirpath=tmp, filename="{epoch}", save_top_k=-1, save_last=False)
        )
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        accumulate_grad_batches=ACCUMULATE,
        gradient_clip_val=10.0,
        gradient_clip_algorithm="norm",
        limit_val_batches=2,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=checkpoints,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp,
        plugins=plugins,
    )


def _fit(trainer: pl.Trainer, module: Tiny, ckpt_path: Path | None = None) -> None:
    trainer.fit(module, _loader(BATCHES, 0), _loader(2, 1), ckpt_path=ckpt_path)


def _optimizer_state(trainer: pl.Trainer) -> list[Tensor]:
    state = trainer.optimizers[0].state_dict()["state"]
    return [state[i][k] for i in sorted(state) for k in sorted(state[i])]


@dataclass
class Run:
    trainer: pl.Trainer
    module: Tiny
    updates_at: list[tuple[int, int]]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The reference fit: EMA, a checkpoint per epoch and one written mid-validation."""
    tmp = tmp_path_factory.mktemp("fit")
    updates_at: list[tuple[int, int]] = []
    original = ModelEMA.update

    def spy(self: ModelEMA, model: nn.Module) -> None:
        assert isinstance(model, pl.LightningModule)
        trainer = model.trainer
        updates_at.append((trainer.current_epoch, trainer.global_step))
        original(self, model)

    ModelEMA.update = spy  # type: ignore[method-assign]
    try:
        module = Tiny(save_in_validation=tmp / "mid-validation.ckpt")
        trainer = _trainer(tmp, checkpoints=True)
        _fit(trainer, module)
    finally:
        ModelEMA.update = original  # type: ignore[method-assign]
    return Run(trainer, module, updates_at)


@pytest.mark.slow
def test_ema_updates_once_per_optimizer_step_under_accumulation(run: Run) -> None:
    ema = _ema_callback(run.trainer).ema
    assert ema is not None
    assert run.trainer.global_step == EPOCHS * STEPS_PER_EPOCH
    assert ema.updates == run.trainer.global_step
    expected = [
        (e, e * STEPS_PER_EPOCH + k) for e in range(EPOCHS) for k in range(1, STEPS_PER_EPOCH + 1)
    ]
    assert run.updates_at == expected


@pytest.mark.slow
def test_lr_and_momentum_at_each_optimizer_step_follow_the_schedule(run: Run) -> None:
    scheduler = run.trainer.lr_scheduler_configs[0].scheduler
    assert isinstance(scheduler, WarmupLinearLR)
    schedule = scheduler.schedule
    assert schedule.steps_per_epoch == STEPS_PER_EPOCH and schedule.warmup_steps == 5
    groups = run.trainer.optimizers[0].param_groups
    assert [s for s, _, _ in run.module.record.lrs] == list(range(EPOCHS * STEPS_PER_EPOCH))
    for step, lrs, momenta in run.module.record.lrs:
        expected = [
            schedule.lr(step, g["initial_lr"], bias=g["param_group"] == "bias") for g in groups
        ]
        assert lrs == expected, step
        assert momenta == [schedule.momentum_at(step)] * len(groups)


@pytest.mark.slow
def test_validation_runs_on_the_ema_and_training_is_unchanged(run: Run, tmp_path: Path) -> None:
    assert run.module.record.validation_saw_ema == [True] * (2 * EPOCHS)
    ema = _ema_callback(run.trainer).ema
    assert ema is not None
    live = run.module.state_dict()
    assert all(torch.equal(v, run.module.record.last_live[k]) for k, v in live.items())
    assert not torch.equal(live["net.4.weight"], ema.shadow["net.4.weight"])

    plain = Tiny()
    _fit(_trainer(tmp_path, ema=False), plain)
    assert all(torch.equal(v, plain.state_dict()[k]) for k, v in live.items())


@pytest.mark.slow
def test_checkpoints_hold_live_weights_and_the_ema(run: Run, tmp_path: Path) -> None:
    final = torch.load(Path(run.trainer.default_root_dir) / "epoch=1.ckpt", weights_only=True)
    ema = _ema_callback(run.trainer).ema
    assert ema is not None
    assert all(torch.equal(v, run.module.state_dict()[k]) for k, v in final["state_dict"].items())
    averaged = ema_state_dict(final)
    assert averaged is not None and final["ema"]["updates"] == EPOCHS * STEPS_PER_EPOCH
    assert all(torch.equal(v, ema.shadow[k]) for k, v in averaged.items())

    # Written while the EMA was swapped in: still the live weights.
    mid = torch.load(Path(run.trainer.default_root_dir) / "mid-validation.ckpt", weights_only=True)
    assert all(torch.equal(v, run.module.record.last_live[k]) for k, v in mid["state_dict"].items())
    assert not all(torch.equal(v, averaged[k]) for k, v in mid["state_dict"].items())


@pytest.mark.slow
def test_resume_from_the_first_epoch_ends_in_the_same_state(run: Run, tmp_path: Path) -> None:
    module = Tiny()
    trainer = _trainer(tmp_path)
    _fit(trainer, module, ckpt_path=Path(run.trainer.default_root_dir) / "epoch=0.ckpt")
    assert all(torch.equal(v, run.module.state_dict()[k]) for k, v in module.state_dict().items())
    first, second = _optimizer_state(run.trainer), _optimizer_state(trainer)
    assert len(first) == len(second) > 0
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    ema, resumed = _ema_callback(run.trainer).ema, _ema_callback(trainer).ema
    assert ema is not None and resumed is not None and resumed.updates == ema.updates
    assert all(torch.equal(v, ema.shadow[k]) for k, v in resumed.shadow.items())
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == EPOCHS * STEPS_PER_EPOCH


@pytest.mark.slow
def test_validate_from_a_checkpoint_uses_its_ema(run: Run, tmp_path: Path) -> None:
    module = Tiny()
    trainer = _trainer(tmp_path)
    trainer.validate(
        module, _loader(2, 1), ckpt_path=Path(run.trainer.default_root_dir) / "epoch=1.ckpt"
    )
    ema = _ema_callback(run.trainer).ema
    assert ema is not None
    assert module.record.validation_saw_ema == [True, True]
    assert all(torch.equal(v, run.module.state_dict()[k]) for k, v in module.state_dict().items())


@pytest.mark.slow
def test_live_weights_return_when_validation_raises(tmp_path: Path) -> None:
    module = Tiny(fail_validation_in_epoch=0)
    trainer = _trainer(tmp_path, epochs=1)
    with pytest.raises(RuntimeError, match="validation failed"):
        _fit(trainer, module)
    ema = _ema_callback(trainer).ema
    assert ema is not None and ema.updates == STEPS_PER_EPOCH
    live = module.state_dict()
    assert all(torch.equal(v, module.record.last_live[k]) for k, v in live.items())
    assert not torch.equal(live["net.4.weight"], ema.shadow["net.4.weight"])


@pytest.mark.slow
def test_fit_through_the_grad_scaler_path(tmp_path: Path) -> None:
    # 16-mixed: Lightning runs the closure itself, unscales, clips, then calls
    # scaler.step(optimizer) without a closure.
    scaler = GradScaler("cpu", init_scale=2.0**8)
    module = Tiny()
    trainer = _trainer(tmp_path, plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)])
    _fit(trainer, module)
    ema = _ema_callback(trainer).ema
    assert ema is not None and ema.updates == trainer.global_step == EPOCHS * STEPS_PER_EPOCH
    assert module.record.validation_saw_ema == [True] * (2 * EPOCHS)
    start = Tiny().state_dict()
    assert all(torch.isfinite(v).all() for v in module.state_dict().values())
    assert not torch.equal(module.state_dict()["net.4.weight"], start["net.4.weight"])
