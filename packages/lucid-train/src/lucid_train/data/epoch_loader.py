"""A training loader whose workers go on into the next epoch instead of waiting for it.

A plain ``DataLoader`` with persistent workers restarts its sampler when the next epoch's
iteration begins: the workers sit idle from the last batch handed out until then, and the new
epoch's first batch comes only after one worker has built it from scratch. At batch 64 that
wait is a few hundred milliseconds an epoch with the GPU idle (a third of a 1,000-image epoch
on the GPU machine, `docs/benchmarks/peer-speed.md`). Ultralytics' loader avoids it by never
ending its sampler; this one does the same for `EpochSampler`, whose keys already carry their
epoch (`lucid_train.data.dataset`), so the batches prepared ahead are exactly those that a
fresh loader would build once the trainer sets the next epoch.

The iteration the trainer sees is still one epoch: ``len(loader)`` batches per ``iter()``. When
the trainer's epoch is not the one prepared ahead (the first epoch, a resumed fit, an epoch left
before its end such as under ``limit_train_batches``), the workers are restarted at the
trainer's epoch, as a plain loader restarts them every epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count
from typing import Any

from torch.utils.data import DataLoader

from lucid_train.data.dataset import EpochSampler

__all__ = ["EpochLoader"]


class _EpochsAhead:
    """The batches of keys of `EpochSampler` for its epoch, then the next, without end; its
    length is one epoch's batches (what ``len(loader)`` reports)."""

    def __init__(self, sampler: EpochSampler, batch_size: int, drop_last: bool) -> None:
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __len__(self) -> int:
        n, b = len(self.sampler), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        per_epoch = len(self)
        for epoch in count(self.sampler.epoch):
            keys = list(self.sampler.keys(epoch))
            for k in range(per_epoch):
                yield keys[k * self.batch_size : (k + 1) * self.batch_size]


class EpochLoader(DataLoader[Any]):
    """``DataLoader`` over an `EpochSampler` whose persistent workers prepare the next epoch's
    batches while the current one trains. With no workers, without persistent workers or with
    another sampler it is a plain ``DataLoader``. Same constructor as ``DataLoader``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ahead_epoch = -1  # the epoch the running workers are on, and its batches taken
        self._ahead_taken = 0

    def _runs_ahead(self) -> bool:
        return (
            self.num_workers > 0
            and self.persistent_workers
            and isinstance(self.sampler, EpochSampler)
            and self.batch_size is not None
        )

    @property
    def _index_sampler(self) -> Any:
        if self._runs_ahead():
            assert isinstance(self.sampler, EpochSampler) and self.batch_size is not None
            return _EpochsAhead(self.sampler, self.batch_size, self.drop_last)
        return super()._index_sampler

    def __iter__(self) -> Any:
        if not self._runs_ahead():
            return super().__iter__()
        n = len(self)
        if self._ahead_taken >= n:  # the last epoch was taken to its end: on to the next
            self._ahead_epoch, self._ahead_taken = self._ahead_epoch + 1, 0
        assert isinstance(self.sampler, EpochSampler)
        wanted = self.sampler.epoch
        if self._iterator is None or (self._ahead_epoch, self._ahead_taken) != (wanted, 0):
            super().__iter__()  # new workers, or the running ones restarted, at ``wanted``
            self._ahead_epoch, self._ahead_taken = wanted, 0
        return self._one_epoch(n)

    def _one_epoch(self, n: int) -> Iterator[Any]:
        iterator = self._iterator
        assert iterator is not None
        # stops early if Lightning shuts the workers down (`_iterator` reset) mid-epoch
        while self._ahead_taken < n and self._iterator is iterator:
            batch = next(iterator)
            self._ahead_taken += 1
            yield batch
