"""Under Lightning's Trainer, a module that opts into capture ends its fit as the eager fit does.

Lightning keeps autocast, GradScaler, optimizer, scheduler, ``zero_grad`` and accumulation; the
callback activates the recorder once per fit, validation in between runs eager, and a second fit
in the same process starts clean.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from lucid_capture import NetworkRecorder, Reason
from lucid_testing.capture_models import (
    ConvBNNet,
    batches,
    bitwise_equal,
    loss_of,
    state_differences,
    strict_numerics,
)

pytestmark = pytest.mark.gpu
L = pytest.importorskip("lightning.pytorch", reason="needs lucid-capture[lightning]")
from lucid_capture.lightning import CaptureCallback  # noqa: E402


class Module(L.LightningModule):
    def __init__(self, capture: bool) -> None:
        super().__init__()
        self.net = ConvBNNet(attention=True)
        self.graphed = NetworkRecorder(self.net) if capture else None
        self.train_losses: list[torch.Tensor] = []
        self.val_losses: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> Any:
        return self.graphed(x) if self.graphed is not None else self.net(x)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = loss_of(self(batch[0]))
        self.train_losses.append(loss.detach().clone())
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        loss = loss_of(self(batch[0]))
        self.val_losses.append(loss.detach().clone())
        self.log("val_loss", loss)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


def _loader(n: int, batch_size: int) -> torch.utils.data.DataLoader[Any]:
    (x,) = batches("convbn", [n], seed=11)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=batch_size)


def fit(
    capture: bool, precision: str, accumulate: int
) -> tuple[dict[str, Any], Module, CaptureCallback]:
    with strict_numerics():
        L.seed_everything(0, verbose=False)
        module = Module(capture)
        callback = CaptureCallback()
        trainer = L.Trainer(
            accelerator="cuda",
            devices=1,
            precision=precision,  # type: ignore[arg-type]
            accumulate_grad_batches=accumulate,
            max_epochs=2,
            callbacks=[callback],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=1,
            deterministic=True,
        )
        # 7 images at batch 2: three full batches and a partial last one per epoch.
        trainer.fit(module, _loader(7, 2), _loader(4, 2))
        state: dict[str, Any] = {f"model/{k}": v for k, v in module.state_dict().items()}
        optimizer = trainer.optimizers[0]
        names = {id(p): n for n, p in module.named_parameters()}
        for p, s in optimizer.state.items():
            for key, value in s.items():
                state[f"optim/{names[id(p)]}/{key}"] = value
        scheduler = trainer.lr_scheduler_configs[0].scheduler
        state["lr"] = torch.tensor(scheduler.get_last_lr(), dtype=torch.float64)
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        if scaler is not None:
            for key, value in scaler.state_dict().items():
                state[f"scaler/{key}"] = torch.tensor(value, dtype=torch.float64)
        for i, loss in enumerate(module.train_losses):
            state[f"train_loss/{i}"] = loss
        for i, loss in enumerate(module.val_losses):
            state[f"val_loss/{i}"] = loss
        for key, value in trainer.callback_metrics.items():
            state[f"metric/{key}"] = value
        return state, module, callback


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-mixed"])
def test_trainer_fit_with_capture_matches_eager_fit(precision: str, accumulate: int) -> None:
    eager, _, _ = fit(capture=False, precision=precision, accumulate=accumulate)
    replay, module, callback = fit(capture=True, precision=precision, accumulate=accumulate)
    diffs = state_differences(eager, replay)
    assert not diffs, f"{len(diffs)} differ from eager, first: {diffs[:5]}"
    assert module.graphed is not None
    stats = module.graphed.stats
    assert stats.recordings == 1 and stats.retirements == 0
    assert stats.replays == 6, stats.summary()  # 3 full batches x 2 epochs
    assert stats.eager[Reason.SHAPE] == 2  # the partial last batch of each epoch
    assert stats.eager[Reason.INFERENCE] > 0  # validation (sanity check + 2 epochs)
    assert not module.graphed.recorded, "graphs must be freed at fit end"
    assert callback.summaries and "1 recording" in callback.summaries[0]


def test_second_fit_in_the_same_process_starts_clean() -> None:
    _, module, callback = fit(capture=True, precision="16-mixed", accumulate=1)
    assert module.graphed is not None
    first = module.graphed.summary()
    with strict_numerics():
        L.seed_everything(0, verbose=False)
        trainer = L.Trainer(
            accelerator="cuda",
            devices=1,
            precision="16-mixed",
            max_epochs=1,
            callbacks=[callback],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        )
        trainer.fit(module, _loader(7, 2))
    stats = module.graphed.stats
    assert stats.recordings == 1 and stats.replays == 3, (first, stats.summary())
    assert not module.graphed.recorded


def test_capture_does_not_change_state_dict_keys() -> None:
    assert list(Module(capture=True).state_dict()) == list(Module(capture=False).state_dict())


def test_eager_and_replay_validation_metrics_agree_bitwise() -> None:
    eager, _, _ = fit(capture=False, precision="bf16-mixed", accumulate=1)
    replay, _, _ = fit(capture=True, precision="bf16-mixed", accumulate=1)
    for key in [k for k in eager if k.startswith(("val_loss", "metric"))]:
        assert bitwise_equal(torch.as_tensor(eager[key]), torch.as_tensor(replay[key])), key
