"""How many target rows per image the recorded loss is padded to: `LossCapacity`.

A recorded loss is one static graph, so the ragged targets of a batch are padded to a fixed
capacity (docs/capture.md, "Padding capacity"); the loss's value does not depend on it, its cost
grows with it. With capture on and no capacity given, the first training batch fits it to the
data, a busier batch grows it, and the first batch without mosaic fits it again. A capacity the
user gave (``loss_capacity``) stays; a batch over it runs eager at its own size.
"""

from __future__ import annotations

from lightning.pytorch.utilities import rank_zero_only

from lucid_capture import LossRecorder
from lucid_train.data.transport import Batch
from lucid_train.losses import batch_capacity_report

__all__ = ["CAPACITY_STEP", "CAPTURE_CAPACITY", "MAX_GROWN_CAPACITY", "LossCapacity"]

CAPTURE_CAPACITY = 32  # the recorder's capacity until the first batch fits it to the data
CAPACITY_STEP = 8  # a fitted or grown capacity is a multiple of this many rows
MAX_GROWN_CAPACITY = 512  # the most `LossCapacity.grow` records the loss for


class LossCapacity:
    """The loss recorder's capacity policy.

    Args:
        recorder: the module's loss recorder, whose ``capacity`` this sets.
        given: the user's ``loss_capacity`` (None: fitted and grown while capture is on).

    Attributes:
        fitted_in: the epoch the capacity was last fitted in (None: not yet), so that closing
            mosaic can fit it again.
    """

    def __init__(self, recorder: LossRecorder, given: int | None) -> None:
        self.recorder = recorder
        self.given = given
        self.fitted_in: int | None = None

    @property
    def target(self) -> int | None:
        """Rows per image the training targets are padded to (None: each batch's largest)."""
        if self.given is not None:
            return self.given
        return self.recorder.capacity if self.recorder.enabled else None

    def adapts(self) -> bool:
        """Whether the capacity is fitted and grown (none given, capture on)."""
        return self.given is None and self.recorder.enabled

    def for_batch(
        self, batch: Batch, capacity: int | None, *, epoch: int, close_mosaic_from: int | None
    ) -> int | None:
        """``capacity`` (the module's target) when ``batch`` fits it, else None (the batch's
        own largest). When the capacity adapts, the first batch fits it to the data (`fit`), a
        later batch over it grows it (`grow`), so that the next batches replay instead of
        running eager; the first batch without mosaic fits it again (`mosaic_closed`)."""
        if capacity is None:
            return None
        report = batch_capacity_report(batch, capacity)
        if self.adapts():
            if self.mosaic_closed(epoch, close_mosaic_from):
                self.recorder.release()  # the next call records at the refitted capacity
                return self.fit(report.max_count, "the first batch without mosaic", epoch)
            if self.fitted_in is None:
                return self.fit(report.max_count, "the first batch", epoch)
        return capacity if report.fits else self.grow(report.max_count)

    def recording_to_spare(self) -> bool:
        """Whether the loss may record again beside the recording kept for a retirement."""
        recorder = self.recorder
        return recorder.stats.recordings < recorder.max_recordings - 1

    def mosaic_closed(self, epoch: int, close_mosaic_from: int | None) -> bool:
        """Whether the capacity was fitted on mosaic batches and ``epoch`` trains without
        mosaic (the datamodule's ``close_mosaic_from``). A mosaic packs four images into one,
        so a capacity fitted or grown on mosaics is about four times what the single images of
        the closing epochs hold, and the recorded loss would pay for those rows to the end of
        the fit. Fitting again spends one recording, and only while one is left for a
        retirement."""
        fitted_in, closes = self.fitted_in, close_mosaic_from
        if fitted_in is None or closes is None or not fitted_in < closes <= epoch:
            return False
        return self.recording_to_spare()

    def fit(self, largest: int, which: str, epoch: int) -> int | None:
        """The recorded loss capacity for ``which`` batch, holding ``largest`` targets in one
        image: a multiple of `CAPACITY_STEP` a quarter above it (None: over
        `MAX_GROWN_CAPACITY`, the batch runs eager at its own size).

        The mask-aware assignment and the mask loss cost about in proportion to the padded rows
        (docs/benchmarks/segment-cpu.md), so a fixed guess of 32 made a sparse set's recorded
        segment loss pay for twice the rows its batches hold; a batch later over the fitted
        capacity grows it (`grow`). The fit's first batch spends no recording (none was made
        yet); fitting again when mosaic closes spends one."""
        recorder = self.recorder
        self.fitted_in = epoch
        recorder.capacity = min(capacity_above(largest), MAX_GROWN_CAPACITY)
        print_once(
            f"lucid-capture [loss]: {which} holds up to {largest} targets in an image: "
            f"the loss records with {recorder.capacity} rows an image"
        )
        return recorder.capacity if largest <= recorder.capacity else None  # over the most

    def grow(self, largest: int) -> int | None:
        """A larger recorded loss capacity for a batch holding ``largest`` targets in one image
        and those like it, or None (run eager).

        The first batch fits the capacity (`fit`), but a mosaic of four busy images can hold
        more than any image before it, and COCO's busiest hold over a hundred. The first batch
        over the capacity sets it to at least twice the old one and to a multiple of
        `CAPACITY_STEP` a quarter above its own largest count, is padded to it, and the loss
        records again on it; the old recording is freed. The sums over the slots do not depend
        on the capacity (docs/capture.md, "Padding capacity"), so the bits stay those of eager.
        Bounded by the recorder's `max_recordings` (one is kept for a retirement) and
        `MAX_GROWN_CAPACITY`; a capacity given as ``loss_capacity`` stays."""
        recorder = self.recorder
        if not self.adapts() or not self.recording_to_spare():
            return None
        grown = min(max(2 * recorder.capacity, capacity_above(largest)), MAX_GROWN_CAPACITY)
        if grown < largest:
            return None
        print_once(
            f"lucid-capture [loss]: a batch holds {largest} targets in one image, over the "
            f"recorded capacity of {recorder.capacity}: recording the loss again at {grown}"
        )
        recorder.release()  # the next call records at the new capacity
        recorder.capacity = grown
        return grown


def capacity_above(largest: int) -> int:
    """The multiple of `CAPACITY_STEP` at or above ``largest`` plus a quarter (at least one
    step): headroom, so that the next busier batch does not record again at once."""
    return max(1, -(-(largest * 5) // (4 * CAPACITY_STEP))) * CAPACITY_STEP


@rank_zero_only
def print_once(line: str) -> None:
    """Print on rank 0 only."""
    print(line)
