"""Gradient accumulation to the nominal batch, ramped from 1 during warm-up as the authors do.

The authors' trainer (Ultralytics 8.4) sums the gradients of ``nominal = max(round(nbs / batch),
1)`` batches per optimizer step (capped at the run's batch count), and during warm-up, at batch
``ni <= W`` (``W = round(min(warmup_epochs, epochs - 1) * batches_per_epoch)``), uses::

    accumulate(ni) = max(1, int(round(interp(ni, [0, W], [1, nominal]))))

stepping at batch ``ni`` when ``ni - last_step >= accumulate(ni)``. Losses are summed, never
divided by the accumulation count (their loss is already batch-scaled, assumptions.md T9).

Windows run across epoch boundaries as theirs do, and a final partial window is left unstepped.
Which batches step is a pure function of the batch index; the gradients of a window still open
when a checkpoint is written travel in it (`YOLOModule.on_save_checkpoint`), so a resumed run is
the same run (assumptions.md T44).
"""

from __future__ import annotations

import dataclasses
import functools

from lucid_train.optim.schedule import _interp

__all__ = ["AccumulationPlan", "resolve_accumulation"]


def resolve_accumulation(value: int | str, batch_size: int, nbs: int) -> tuple[int, bool]:
    """``(nominal, ramped)`` of an ``accumulate`` setting: ``"auto"`` is the authors'
    ``max(round(nbs / batch_size), 1)`` ramped in warm-up; an integer is that many batches per
    step from the first batch on."""
    if value == "auto":
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        return max(round(nbs / batch_size), 1), True
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"accumulate must be 'auto' or a positive integer, got {value!r}"
        ) from None
    if count < 1 or str(count) != str(value).strip():
        raise ValueError(f"accumulate must be 'auto' or a positive integer, got {value!r}")
    return count, False


@dataclasses.dataclass(frozen=True)
class AccumulationPlan:
    """Which batches end with an optimizer step.

    Attributes:
        nominal: batches per optimizer step after warm-up (capped at the run's batch count).
        batches_per_epoch: training batches per epoch.
        warmup_batches: ``W``; 0 (or ``ramped=False``) means ``nominal`` from the first batch.
        ramped: ramp from 1 to ``nominal`` over the warm-up.
    """

    nominal: int
    batches_per_epoch: int
    warmup_batches: int = 0
    ramped: bool = True

    def __post_init__(self) -> None:
        if self.nominal < 1 or self.batches_per_epoch < 1:
            raise ValueError(
                "nominal and batches_per_epoch must be >= 1, "
                f"got {self.nominal} and {self.batches_per_epoch}"
            )

    @classmethod
    def for_run(
        cls,
        nominal: int,
        *,
        batches_per_epoch: int,
        epochs: int,
        warmup_epochs: float,
        ramped: bool = True,
    ) -> AccumulationPlan:
        """The authors' plan: ``nominal`` capped at ``batches_per_epoch * epochs``, ramped over
        the warm-up's ``round(min(warmup_epochs, epochs - 1) * batches_per_epoch)`` batches."""
        warm = min(warmup_epochs, max(epochs - 1, 0))
        warmup = round(warm * batches_per_epoch) if warm > 0 else 0
        return cls(
            nominal=min(nominal, max(batches_per_epoch * max(epochs, 1), 1)),
            batches_per_epoch=batches_per_epoch,
            warmup_batches=warmup,
            ramped=ramped,
        )

    def accumulate_at(self, batch: int) -> int:
        """Batches per step in force at 0-based global ``batch``."""
        warmup = self.warmup_batches
        if not self.ramped or not warmup or batch > warmup:
            return self.nominal
        # numpy.interp's arithmetic, then round half to even, as the authors
        return max(1, round(_interp(batch, warmup, 1.0, float(self.nominal))))

    @functools.cached_property
    def _warmup_steps(self) -> tuple[int, ...]:
        """The steps among batches ``0..W`` (none without a ramp)."""
        if not self.ramped or not self.warmup_batches:
            return ()
        last, steps = -1, []
        for ni in range(self.warmup_batches + 1):
            if ni - last >= self.accumulate_at(ni):
                steps.append(ni)
                last = ni
        return tuple(steps)

    @functools.cached_property
    def _warmup_set(self) -> frozenset[int]:
        return frozenset(self._warmup_steps)

    def steps_at(self, batch: int) -> bool:
        """Whether 0-based global ``batch`` ends with an optimizer step."""
        warm = self._warmup_steps
        if warm and batch <= self.warmup_batches:
            return batch in self._warmup_set
        last = warm[-1] if warm else -1  # after warm-up: every ``nominal`` batches from there
        return batch > last and (batch - last) % self.nominal == 0

    def starts_window(self, batch: int) -> bool:
        """Whether ``batch`` is the first of an accumulation window (its gradients start at
        zero)."""
        return batch == 0 or self.steps_at(batch - 1)

    def steps_in_epoch(self, epoch: int) -> list[int]:
        """The global batch indices of ``epoch`` that step."""
        start = epoch * self.batches_per_epoch
        return [b for b in range(start, start + self.batches_per_epoch) if self.steps_at(b)]
