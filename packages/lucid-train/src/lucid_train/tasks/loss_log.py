"""The training terms' log: summed on the device every batch, handed to Lightning when it writes.

``self.log`` costs Lightning about a quarter of a millisecond of host bookkeeping per call, and a
few kernel launches for its epoch mean. Seven terms a batch add up to about 2 ms. That is time on
the host thread that a small batch's replayed step waits for. Here a batch costs one
concatenation and one add. Lightning gets the step values only on the batches whose logs it
writes (every ``log_every_n_steps``), and the epoch means once, at the epoch's end. The columns
of ``metrics.csv`` stay the same: ``train/<term>_step``, ``train/<term>_epoch`` and
``train/loss``. The mean is the same batch-size-weighted one that Lightning's ``on_epoch``
reduction takes.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["TrainingLossLog"]


class TrainingLossLog:
    """Batch-size-weighted sums of the loss items and the total over the batches of an epoch."""

    def __init__(self) -> None:
        self.names: tuple[str, ...] = ()
        self._sums: Tensor | None = None  # items then the total, each times its batch's size
        self._images = 0
        self.last: Tensor | None = None  # the latest batch's items (for callbacks and tests)

    def reset(self) -> None:
        self._sums = self.last = None
        self._images = 0

    def add(self, items: Tensor, total: Tensor, names: tuple[str, ...], batch_size: int) -> Tensor:
        """Count one batch. Returns its items as a fresh tensor: a replay's items live in the
        recording's buffers, which the next replay overwrites."""
        values = torch.cat([items.detach().reshape(-1), total.detach().reshape(1)])
        weighted = values * batch_size
        if self._sums is None or names != self.names:
            if self._sums is not None:
                raise ValueError(f"loss terms changed within an epoch: {self.names} -> {names}")
            self._sums, self.names = weighted, names
        else:
            self._sums.add_(weighted)
        self._images += batch_size
        self.last = values[:-1]
        return self.last

    def epoch_means(self) -> dict[str, Tensor]:
        """``train/<term>_epoch`` and ``train/loss``: the means over the epoch's images so far
        (empty before the first batch)."""
        if self._sums is None or self._images == 0:
            return {}
        means = self._sums / self._images
        out = {f"train/{name}_epoch": means[i] for i, name in enumerate(self.names)}
        out["train/loss"] = means[-1]
        return out
