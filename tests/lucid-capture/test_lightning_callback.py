"""The Lightning callback finds a module's recorders, resets them per fit and reports at the end."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from lucid_capture import NetworkRecorder, Reason

L = pytest.importorskip("lightning.pytorch", reason="needs lucid-capture[lightning]")
from lucid_capture.lightning import CaptureCallback, find_recorders  # noqa: E402


class Module(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.graphed = NetworkRecorder(self.net)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.graphed(batch[0]).square().mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(module: Module, callback: CaptureCallback) -> None:
    data = torch.utils.data.TensorDataset(torch.randn(8, 4))
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=4))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_each_fit_starts_clean_and_ends_with_a_summary() -> None:
    module, callback = Module(), CaptureCallback()
    _fit(module, callback)
    assert callback.summaries == [
        "network: 0 recordings, 0 replays, 0 retired, 2 eager (no CUDA: 2)"
    ]
    _fit(module, callback)
    assert module.graphed.stats.eager == {Reason.NO_CUDA: 2}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_disabled_callback_keeps_every_recorder_eager() -> None:
    module = Module()
    _fit(module, CaptureCallback(enabled=False))
    assert module.graphed.stats.eager == {Reason.DISABLED: 2}


def test_capture_recorders_hook_overrides_attribute_discovery() -> None:
    module = Module()
    extra = NetworkRecorder(torch.nn.Linear(1, 1), name="extra")
    module.capture_recorders = lambda: [extra]  # type: ignore[method-assign]
    assert find_recorders(module) == [extra]
    plain = Module()
    assert find_recorders(plain) == [plain.graphed]
