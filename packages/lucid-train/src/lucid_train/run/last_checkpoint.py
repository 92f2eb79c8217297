"""``checkpoints/last.ckpt``: the resume point, written where resuming it is exact.

`LastCheckpoint` writes the file at the start of every epoch, before any other callback's or
the module's ``on_train_epoch_start``, and once more when training ends. At an epoch's start the
previous epoch is wholly done (its validation, its epoch-level metrics, which Lightning logs only
after every ``on_train_epoch_end`` hook, and the schedule's epoch step), and Lightning resumes
such a checkpoint as "restarted on epoch start": the epoch runs again from its first batch with
the sampler's order of that epoch. The loggers are flushed first, so ``metrics.csv`` never lacks
rows of an epoch that the checkpoint counts as done (`lucid_train.report.metrics_log`). A checkpoint
written mid-epoch could not resume exactly (the loader is not resumable, epoch means would
restart), so there is none: a run stopped mid-epoch (SIGKILL, SIGTERM, a crash) redoes that
epoch from ``last.ckpt`` (assumptions.md T54).

``last.ckpt``'s ``epoch`` is the number of epochs completed, which is the epoch it resumes at.

The file is written in the background (`lucid_train.run.checkpoint_io`): its copies are queued at
the epoch's start, its writing starts once the epoch's first `RELEASE_AFTER` batches are queued (so
that the little of it left on the training process, the structure's pickle and the hand-over,
slows none of the batches the GPU is waiting for). Nothing waits for it at the epoch's end: on a
short epoch (half a second for yolo26n on 256 images on the H200) the write and the ``best.ckpt``
queued behind it at the epoch's end are still going when the next epoch starts, and a wait there
held the GPU idle for each epoch's writes (`checkpoint_io.QUEUED`). A run killed before a write is
handed to the writer process leaves the last epoch start written, whole, and its resume runs the
epochs after it again, still exactly; killed after, the writer process finishes the file. SIGTERM
and errors end through the Trainer's teardown, which waits for the writes queued.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from lucid_train.atomic_files import remove_stale_temporaries
from lucid_train.run.checkpoint_io import AtomicCheckpointIO

__all__ = ["LAST_NAME", "RELEASE_AFTER", "LastCheckpoint"]

LAST_NAME = "last.ckpt"
RELEASE_AFTER = 3  # batches; by then the training thread is ahead of the GPU again


class LastCheckpoint(Callback):
    """Writes ``dirpath/last.ckpt`` at each epoch start and at the end of training (rank 0
    writes; Lightning's ``save_checkpoint`` is called on every rank, as it requires).

    Args:
        dirpath: the run's ``checkpoints`` folder.
    """

    def __init__(self, dirpath: str | Path) -> None:
        self.path = Path(dirpath) / LAST_NAME
        self._written_at: int | None = None
        self._at_epoch_start = False

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            remove_stale_temporaries(self.path)  # left by a process killed mid-write
            if io := _atomic_io(trainer):
                io.start_writer()  # it imports torch while the fit sets up, not at the first write

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if not self._at_epoch_start:
            return
        # Lightning resumes an epoch-start checkpoint with one empty pass of its epoch loop that
        # still counts a logged step (`_batches_that_stepped`, the step of metrics.csv); store
        # one less so the resumed run logs at the uninterrupted run's steps.
        state = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.state_dict", {})
        if "_batches_that_stepped" in state:
            state["_batches_that_stepped"] -= 1  # -1 at epoch 0: the empty pass brings it to 0

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # The epoch a resumed run starts at is the one this checkpoint already stands for.
        epoch = checkpoint.get("epoch")
        self._written_at = int(epoch) if epoch is not None else None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self._written_at:
            _recount_restored_epoch(trainer)
            return
        _start_epoch_counters(trainer)
        self._at_epoch_start = True
        if io := _atomic_io(trainer):
            io.hold_next()
        try:
            self._write(trainer)
        finally:
            self._at_epoch_start = False

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:  # fmt: skip
        if batch_idx + 1 == RELEASE_AFTER and (io := _atomic_io(trainer)):
            io.release()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch != self._written_at:
            self._write(trainer)
        if io := _atomic_io(trainer):
            io.wait()

    def _write(self, trainer: L.Trainer) -> None:
        for logger in trainer.loggers:
            logger.save()
        trainer.save_checkpoint(self.path, weights_only=False)
        self._written_at = trainer.current_epoch


def _atomic_io(trainer: L.Trainer) -> AtomicCheckpointIO | None:
    """The Trainer's `AtomicCheckpointIO` (a Trainer built elsewhere may have another IO)."""
    io = trainer.strategy.checkpoint_io
    return io if isinstance(io, AtomicCheckpointIO) else None


def _start_epoch_counters(trainer: L.Trainer) -> None:
    """Zero the epoch loop's per-epoch counters now, as the loop itself does right after this
    hook (its reset for a new epoch), so the checkpoint reads as "epoch started, no batch yet":
    with last epoch's counts still in it, Lightning would resume it as that epoch's end and run
    no batch of this one."""
    loop = trainer.fit_loop.epoch_loop
    loop.batch_progress.reset_on_run()
    loop.scheduler_progress.reset_on_run()
    loop.automatic_optimization.optim_progress.reset_on_run()
    loop.val_loop.batch_progress.total.reset()


def _recount_restored_epoch(trainer: L.Trainer) -> None:
    """In the epoch a resumed run starts with: Lightning's restart on an epoch start leaves the
    epoch counted as started but not as ready (ready = started - 1 once it is started), which a
    fresh run never shows; the next last.ckpt would then not read as an epoch start. Count it
    ready, as a fresh run has at this hook."""
    progress = trainer.fit_loop.epoch_progress
    for tracker in (progress.total, progress.current):
        # (typed as the base tracker; an epoch's is a _ProcessedTracker with ``started``)
        if tracker.ready == getattr(tracker, "started", None):  # a fixed Lightning: left alone
            tracker.ready += 1
