"""`EpochLoader`: persistent workers prepare the next epoch's batches while one trains, and each
epoch still gets exactly the batches that a fresh loader builds for it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from lucid_train.data import LucidDataModule, Task
from lucid_train.data.dataset import EpochSampler
from lucid_train.data.epoch_loader import EpochLoader


class _Keys(Dataset[torch.Tensor]):
    """Hands back its key; with ``seen``, leaves a file per key asked for (from the workers)."""

    def __init__(self, n: int, seen: Path | None = None) -> None:
        self.n, self.seen = n, seen

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: tuple[int, int]) -> torch.Tensor:
        if self.seen is not None:
            (self.seen / f"{key[0]}-{key[1]}").touch()
        return torch.tensor(key)


def _epoch(loader: DataLoader[torch.Tensor], epoch: int) -> list[list[tuple[int, int]]]:
    sampler = loader.sampler
    assert isinstance(sampler, EpochSampler)
    sampler.set_epoch(epoch)
    return [[(int(e), int(p)) for e, p in batch.tolist()] for batch in loader]


def _loader(n: int, seen: Path | None = None, *, kind: type = EpochLoader) -> DataLoader:
    return kind(
        _Keys(n, seen), batch_size=4, sampler=EpochSampler(n), drop_last=True, num_workers=2,
        persistent_workers=True, prefetch_factor=2,
    )  # fmt: skip


def test_each_epoch_gets_its_own_whole_batches() -> None:
    """10 keys in batches of 4, the partial batch dropped: every epoch's batches are its own
    (none straddles two epochs) and those of a plain loader."""
    loader, plain = _loader(10), _loader(10, kind=DataLoader)
    assert len(loader) == 2
    for epoch in range(3):
        got = _epoch(loader, epoch)
        assert got == _epoch(plain, epoch)
        assert got == [[(epoch, p) for p in range(4)], [(epoch, p) for p in range(4, 8)]]


@pytest.mark.parametrize("kind", [EpochLoader, DataLoader])
def test_the_next_epochs_keys_are_asked_for_before_it_begins(kind: type, tmp_path: Path) -> None:
    """A plain loader's workers wait for the next ``iter()``; ours are already on its keys."""
    loader = _loader(16, tmp_path, kind=kind)
    _epoch(loader, 0)
    wait = 20.0 if kind is EpochLoader else 1.0
    deadline = time.monotonic() + wait
    while not (tmp_path / "1-0").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "1-0").exists() is (kind is EpochLoader)
    assert _epoch(loader, 1)[0] == [(1, p) for p in range(4)]


def test_an_epoch_left_before_its_end_or_another_epoch_restarts_at_the_trainers_epoch() -> None:
    loader = _loader(16)
    sampler = loader.sampler
    assert isinstance(sampler, EpochSampler)
    sampler.set_epoch(0)
    it = iter(loader)
    assert [int(p) for _, p in next(it).tolist()] == [0, 1, 2, 3]  # then left, as by a limit
    assert _epoch(loader, 1) == [[(1, p) for p in range(k, k + 4)] for k in (0, 4, 8, 12)]
    assert _epoch(loader, 5)[0] == [(5, p) for p in range(4)]  # a resumed fit's epoch
    assert _epoch(loader, 6)[-1] == [(6, p) for p in range(12, 16)]


def test_the_training_loader_of_the_data_module_runs_ahead_and_its_batches_stay_the_same(
    small_synthetic: Callable[[Task], Path],
) -> None:
    def batches(workers: int) -> list[torch.Tensor]:
        dm = LucidDataModule(
            "detect", small_synthetic("detect"), img_size=96, batch_size=4,
            num_workers=workers,
        )  # fmt: skip
        dm.setup("fit")
        loader = dm.train_dataloader()
        assert isinstance(loader, EpochLoader)
        assert loader._runs_ahead() is (workers > 0)
        out = []
        for epoch in (0, 1):
            sampler = loader.sampler
            assert isinstance(sampler, EpochSampler)
            sampler.set_epoch(epoch)
            out += [b.images for b in loader]
        return out

    for x, y in zip(batches(2), batches(0), strict=True):
        assert torch.equal(x, y)
