"""Warm-up then linear decay, as a pure function of the optimizer step.

The authors (Ultralytics 8.4 trainer) set, at step ``s`` of epoch ``e = s // steps_per_epoch``::

    factor(e)  = max(1 - e / epochs, 0) * (1 - lrf) + lrf          # their LambdaLR, once per epoch
    W          = round(min(warmup_epochs, epochs - 1) * steps_per_epoch)   (0 if that is <= 0)
    s <= W:    lr = interp(s, [0, W], [start, base_lr * factor(e)])  start = warmup_bias_lr for the
                                                                     "bias" group, else 0
               momentum = interp(s, [0, W], [warmup_momentum, momentum])
    s >  W:    lr = base_lr * factor(e); momentum stays at ``momentum`` (untouched when W == 0)

``interp`` is ``numpy.interp``'s arithmetic, so every value equals theirs to the bit
(assumptions.md T43). Here ``s`` is Lightning's ``global_step``: batches under the module's own
accumulation (T44), as the authors count, or optimizer steps under Lightning's. Because every
value is a function of ``s`` alone, a resumed run sees the same values as an uninterrupted one.

Defaults are the authors' (``default.yaml``): lrf 0.01, 3 warm-up epochs, warm-up bias lr 0.1,
momentum 0.8 -> 0.937 (their ``momentum`` argument, where warm-up lands even when the optimizer
was built at 0.9; assumptions.md T42).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

__all__ = ["WarmupLinear", "WarmupLinearLR"]


def _interp(x: float, x_end: float, y_start: float, y_end: float) -> float:
    """``numpy.interp(x, [0, x_end], [y_start, y_end])`` for ``0 <= x <= x_end``, same rounding."""
    if x >= x_end:
        return y_end
    if x <= 0:
        return y_start
    slope = (y_end - y_start) / x_end
    return slope * x + y_start


@dataclasses.dataclass(frozen=True)
class WarmupLinear:
    """The schedule's numbers; :meth:`lr` and :meth:`momentum_at` are pure functions of the step.

    Attributes:
        steps_per_epoch: optimizer steps per epoch (``ceil(batches / accumulate)`` in Lightning).
        epochs: planned epochs.
        warmup_epochs: warm-up length in epochs (fractions allowed).
        lrf: final learning-rate fraction.
        warmup_bias_lr: starting lr of the ``"bias"`` group (``optimizer=auto`` sets 0).
        warmup_momentum: momentum at step 0.
        momentum: momentum at the end of warm-up and after.
    """

    steps_per_epoch: int
    epochs: int
    warmup_epochs: float = 3.0
    lrf: float = 0.01
    warmup_bias_lr: float = 0.1
    warmup_momentum: float = 0.8
    momentum: float = 0.937

    def __post_init__(self) -> None:
        if self.steps_per_epoch < 1 or self.epochs < 1:
            raise ValueError(
                "steps_per_epoch and epochs must be >= 1, "
                f"got {self.steps_per_epoch} and {self.epochs}"
            )

    @property
    def warmup_steps(self) -> int:
        """``round(min(warmup_epochs, epochs - 1) * steps_per_epoch)``: never in the last epoch."""
        epochs = min(self.warmup_epochs, max(self.epochs - 1, 0))
        return round(epochs * self.steps_per_epoch) if epochs > 0 else 0

    def epoch_factor(self, epoch: int) -> float:
        """The authors' linear LambdaLR factor of 0-based ``epoch``: 1 at 0, ``lrf`` at the end."""
        return max(1 - epoch / self.epochs, 0) * (1.0 - self.lrf) + self.lrf

    def lr(self, step: int, base_lr: float, *, bias: bool = False) -> float:
        """Learning rate at 0-based optimizer step ``step`` of a group with base lr ``base_lr``."""
        target = base_lr * self.epoch_factor(step // self.steps_per_epoch)
        warmup = self.warmup_steps
        if warmup and step <= warmup:
            return _interp(step, warmup, self.warmup_bias_lr if bias else 0.0, target)
        return target

    def momentum_at(self, step: int) -> float | None:
        """Momentum at ``step``, or ``None`` when the schedule leaves it alone (no warm-up)."""
        warmup = self.warmup_steps
        if not warmup:
            return None
        return _interp(min(step, warmup), warmup, self.warmup_momentum, self.momentum)


class WarmupLinearLR(LRScheduler):
    """:class:`WarmupLinear` as a scheduler stepped once per optimizer step.

    Sets every group's ``lr`` (from its ``initial_lr``, so the 3x class groups keep their factor)
    and, where the group has one, its ``momentum``. A group is the bias group when its
    ``param_group`` is ``"bias"``. Use with Lightning as
    ``{"scheduler": sched, "interval": "step", "frequency": 1}``; ``state_dict`` holds only plain
    values (safe for ``torch.load(weights_only=True)``).

    Args:
        optimizer: the optimizer whose groups to drive.
        schedule: the numbers.
        last_epoch: the last optimizer step taken, -1 for a fresh run.
    """

    def __init__(self, optimizer: Optimizer, schedule: WarmupLinear, last_epoch: int = -1) -> None:
        self.schedule = schedule
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:  # type: ignore[override]
        """Learning rates for step ``last_epoch`` (a pure function of it)."""
        step = self.last_epoch
        return [
            self.schedule.lr(step, float(base), bias=group.get("param_group") == "bias")
            for base, group in zip(self.base_lrs, self.optimizer.param_groups, strict=True)
        ]

    def _get_closed_form_lr(self) -> list[float]:
        return self.get_lr()

    def step(self, epoch: int | None = None) -> None:
        """Advance one step and set lr and momentum for the next one."""
        with warnings.catch_warnings():
            # Under accumulation (T44) the schedule advances on batches that do not step.
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)`")
            super().step(epoch)
        momentum = self.schedule.momentum_at(self.last_epoch)
        if momentum is not None:
            for group in self.optimizer.param_groups:
                if "momentum" in group:
                    group["momentum"] = momentum

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["schedule"] = dataclasses.asdict(self.schedule)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        schedule = state.pop("schedule")
        super().load_state_dict(state)
        self.schedule = WarmupLinear(**schedule)
