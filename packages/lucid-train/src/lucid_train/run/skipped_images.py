"""`SkippedImages`: the training images found corrupt during an epoch, summarised at its end.

A file that decoded when the split was read can fail later (a disk error, a file rewritten
while the fit runs). The loader then trains on the next image of the split in its place
(`lucid_train.data.dataset`) and names the file in the batch (`Batch.skipped`); this callback
counts them and prints one line per epoch that met any, so the fit goes on and nothing is lost
without a word. The authors' loader drops corrupt images too, when it verifies the split.
"""

from __future__ import annotations

import sys
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

__all__ = ["SkippedImages"]

SHOWN = 5  # file names the summary lists


class SkippedImages(Callback):
    """Counts the corrupt training images of each epoch and prints their summary at its end."""

    def __init__(self) -> None:
        self.samples: dict[str, int] = {}  # file -> samples it was replaced in, this epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.samples = {}

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # our module's training batches travel as (Batch, padded targets)
        plain = batch[0] if isinstance(batch, tuple) and batch else batch
        for path in getattr(plain, "skipped", ()):
            self.samples[path] = self.samples.get(path, 0) + 1

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.samples and trainer.is_global_zero:
            print(summary(trainer.current_epoch, self.samples), file=sys.stderr)


def summary(epoch: int, samples: dict[str, int]) -> str:
    """The epoch's line: how many files, how many samples, the first few names."""
    names = sorted(samples)
    shown = "; ".join(names[:SHOWN]) + (" ..." if len(names) > SHOWN else "")
    return (
        f"lucid data: epoch {epoch}: {len(names)} training image(s) could not be decoded and "
        f"were skipped ({sum(samples.values())} sample(s) took the next image of the split "
        f"instead): {shown}; re-encode or remove them"
    )
