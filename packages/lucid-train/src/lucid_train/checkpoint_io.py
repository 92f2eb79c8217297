"""The Trainer's checkpoint files: written atomically, read without running code.

`AtomicCheckpointIO` is the `lightning.pytorch.plugins.io.CheckpointIO` of every lucid Trainer
(`lucid_train.runs.build_trainer`). Lightning's own writer stages the file in the system's
temporary folder and moves it over, which is a copy (not atomic) when that folder is another
filesystem, and never flushes it to the disk; this one writes beside the target through
`lucid_train.atomic_files.atomic_path`, so ``last.ckpt`` is always a whole checkpoint. Reading
(resume with ``ckpt_path``) goes through `lucid_train.checkpoint.load_checkpoint_file`:
``weights_only=True`` whatever the caller asks, and one-line errors naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO

from lucid_train.atomic_files import atomic_path
from lucid_train.checkpoint import load_checkpoint_file

__all__ = ["AtomicCheckpointIO"]


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` with atomic local writes and safe reads (see the module)."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint takes no storage_options")
        with atomic_path(Path(path)) as tmp:
            torch.save(checkpoint, tmp)

    def load_checkpoint(
        self,
        path: _PATH,
        map_location: Any | None = lambda storage, loc: storage,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        # weights_only is ignored on purpose: nothing in a lucid checkpoint needs more.
        del weights_only
        ckpt: dict[str, Any] = load_checkpoint_file(Path(path), map_location)
        return ckpt
