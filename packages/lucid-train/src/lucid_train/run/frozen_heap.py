"""`FrozenHeap`: what a fit has built by its start kept out of Python's cyclic collector.

The model, the split's records and torch's and Lightning's own objects live to the fit's end.
Each validation builds tens of thousands of result dicts (300 detections an image on the e2e
path, both paths), which set off the collector's full passes, and each pass scans every object
of the process: on the GPU a 64-image validation took three times a training epoch
(docs/benchmarks/epoch-overhead.md, assumptions.md T91). Frozen at the fit's start, those
objects are skipped by every pass; thawed at its teardown (after an error too), so a later
collection frees whatever of them a finished fit leaves in cycles.
"""

from __future__ import annotations

import gc

import lightning as L
from lightning.pytorch.callbacks import Callback

__all__ = ["FrozenHeap"]


class FrozenHeap(Callback):
    """``gc.freeze`` at the fit's start, ``gc.unfreeze`` at its teardown (`build_trainer` adds
    it; a user's own frozen objects are thawed with the fit's)."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        gc.collect()
        gc.freeze()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        gc.unfreeze()
