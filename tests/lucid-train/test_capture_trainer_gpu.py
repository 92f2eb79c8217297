"""Capture inside the trainer on the GPU: a fit with the network and loss replayed ends where the
eager fit ends, bit for bit (weights, optimizer state, logged losses), and says what it did.

The first trainer-level parity case of issue 7 (detection, 32-true, accumulation 1); the full
matrix (tasks x precisions x accumulation x layouts) is that issue's remaining work.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from lucid_capture import Reason
from lucid_train.data import LucidDataModule
from lucid_train.module import YOLOModule, module_class
from lucid_train.runs import build_trainer

pytestmark = pytest.mark.gpu
CAPACITY = 16
STEPS = 3  # the small set: 12 images, batch 4


def _fit(root: Path, tmp_path: Path, capture: str) -> tuple[dict[str, Any], YOLOModule]:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    L.seed_everything(0, workers=True)
    dm = LucidDataModule("detect", root, img_size=64, batch_size=4, num_workers=0)
    dm.setup("fit")
    s = dm.schema
    module = module_class("detect")(
        num_classes=s.num_classes, img_size=64, capture=capture, loss_capacity=CAPACITY
    )
    trainer = build_trainer(
        tmp_path / capture, accelerator="cuda", devices=1, max_epochs=2,
        limit_train_batches=STEPS, limit_val_batches=1, deterministic="warn",
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(module, datamodule=dm)
    state: dict[str, Any] = {f"model/{k}": v for k, v in module.state_dict().items()}
    names = {id(p): n for n, p in module.named_parameters()}
    for p, values in trainer.optimizers[0].state.items():
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                state[f"optim/{names[id(p)]}/{key}"] = value
    for key, value in trainer.callback_metrics.items():
        state[f"metric/{key}"] = value
    return state, module


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = torch.as_tensor(a).detach().cpu(), torch.as_tensor(b).detach().cpu()
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    )


@pytest.mark.xfail(
    strict=True,
    reason="measured 2026-11-29 on the H200: weights and metrics equal eager bitwise, but Adam's "
    "exp_avg of head.one2many.box.{1,2}.2.bias and exp_avg_sq of box.1.2.bias differ; "
    "not yet explained (issue 7)",
)
def test_captured_detection_fit_matches_the_eager_fit_bitwise(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    root = small_synthetic("detect")
    eager, _ = _fit(root, tmp_path, "off")
    replay, module = _fit(root, tmp_path, "on")
    assert eager.keys() == replay.keys()
    diffs = [k for k in eager if not _same(eager[k], replay[k])]
    assert not diffs, f"{len(diffs)} differ from eager, first: {diffs[:5]}"
    for recorder in (module.network_recorder, module.loss_recorder):
        stats = recorder.stats
        assert stats.recordings == 1 and stats.retirements == 0, stats.summary()
        assert stats.replays + stats.eager[Reason.OVER_CAPACITY] == 2 * STEPS, stats.summary()
        assert stats.replays > 0, stats.summary()
