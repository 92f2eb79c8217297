"""The loss recorder: a loss over ragged targets, replayed on targets padded to a fixed capacity.

A recording has static shapes, so per-image targets are padded to ``capacity`` rows with a
validity mask before the call (``lucid_kernels.padding`` does this; any padding that produces
``(batch, rows, ...)`` tensors will do). The loss must be written for padded inputs: masks instead
of boolean indexing, no ``.item()`` or ``nonzero``. Then the eager route and the replay route
compute the same padded arithmetic and agree bit for bit, non-finite values included.

A batch whose targets do not fit is padded by the caller to its own size (never truncated) and runs
eager with reason ``over capacity``. Values that are not padded (strides, a loss weight that follows
a schedule) must be passed as tensors: a Python number is baked into the recording, and a new value
runs eager with reason ``arguments``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from lucid_capture.reasons import Reason
from lucid_capture.recorder import Recorder, check_count


class LossRecorder(Recorder):
    """Replay ``loss_fn(*args)`` as CUDA graphs when its padded targets fit ``capacity``.

    Args:
        loss_fn: the loss, written for padded targets; returns a tensor or a structure of them.
        capacity: the padded row count the recording is made for.
        targets: positions of padded target tensors among the arguments; dimension 1 of each is
            its row count.
        rows: instead of ``targets``, a function of the call's arguments giving the padded row
            count (for targets held in a structure, e.g. a dataclass of padded tensors).
        module: a module whose parameters the loss trains (e.g. a density flow), if any.
    """

    def __init__(
        self,
        loss_fn: Callable[..., Any],
        *,
        capacity: int,
        targets: Sequence[int] = (),
        rows: Callable[[Sequence[Any]], int] | None = None,
        module: nn.Module | None = None,
        name: str = "loss",
        **options: Any,
    ) -> None:
        check_count(name, "capacity", capacity, least=1)
        if not targets and rows is None:
            raise ValueError("say where the padded rows are: `targets` positions or `rows`")
        super().__init__(loss_fn, name=name, **options)
        self.capacity = capacity
        self.targets = tuple(targets)
        self.rows = rows
        self.module = module

    def parameters(self) -> Sequence[torch.Tensor]:
        return () if self.module is None else tuple(self.module.parameters())

    def buffers(self) -> Sequence[torch.Tensor]:
        return () if self.module is None else tuple(self.module.buffers())

    def is_training(self) -> bool:
        return True if self.module is None else self.module.training

    def fits(self, args: Sequence[Any]) -> bool:
        """Whether every padded target argument has at most ``capacity`` rows."""
        if self.rows is not None and self.rows(args) > self.capacity:
            return False
        return all(_rows(args, i) <= self.capacity for i in self.targets)

    def _early_mismatch(self, args: Sequence[Any]) -> Reason | None:
        return None if self.fits(args) else Reason.OVER_CAPACITY

    def _check_call(self, args: Sequence[Any]) -> None:
        for i in self.targets:
            if not -len(args) <= i < len(args):
                raise ValueError(
                    f"lucid-capture [{self.name}]: targets names argument {i}, but the call has "
                    f"{len(args)} argument(s)"
                )
            _rows(args, i)


def _rows(args: Sequence[Any], position: int) -> int:
    target = args[position]
    if not isinstance(target, torch.Tensor) or target.dim() < 2:
        raise TypeError(
            f"lucid-capture: argument {position} is named a padded target (targets=) but is not "
            "a (batch, rows, ...) tensor"
        )
    return int(target.shape[1])
