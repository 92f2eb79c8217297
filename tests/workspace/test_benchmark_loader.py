"""`benchmarks/benchmark_loader.py` measures the loader a fit runs: its defaults are the data
module's and the augmentation's, and ``--render auto`` resolves as the fit's does."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest
import torch

from lucid_train.data.augment.config import AugmentConfig
from lucid_train.data.datamodule import LucidDataModule
from lucid_train.data.dataset import EpochSampler
from lucid_train.data.epoch_loader import EpochLoader
from lucid_train.data.render_choice import auto_render

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
benchmark_loader = pytest.importorskip("benchmark_loader")


def test_the_loader_benchmark_defaults_are_a_fits() -> None:
    args = benchmark_loader.parse_args(["--out", "unused.json", "--task", "detect"])
    pool = inspect.signature(LucidDataModule).parameters["mosaic_pool"].default
    assert args.mosaic_pool == pool == "buffer"
    assert (args.mixup, args.copy_paste) == (AugmentConfig().mixup, AugmentConfig().copy_paste)
    card = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    assert (args.render, args.render_why) == auto_render("detect", "n", args.workers, card=card)


def test_epochs_time_whole_epochs_after_the_first_as_a_fit_is_timed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--epochs 3`` reads epochs 1 and 2 whole (every batch of each), not epoch 0, whose
    first batches wait for the workers to start."""
    calls: list[int] = []
    clock = iter(float(t) for t in range(100))
    monkeypatch.setattr(benchmark_loader.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(benchmark_loader, "_take", lambda dm, batch: calls.append(batch) or 4)
    rate = benchmark_loader._epochs_rate(object(), [0, 1, 2], 3)  # type: ignore[arg-type]
    assert calls == [0, 1, 2] * 3
    assert rate == (2 * 3 * 4) / 2.0  # 24 images over two epochs of one clock tick each
    with pytest.raises(SystemExit):
        benchmark_loader.parse_args(["--out", "unused.json", "--epochs", "1"])


class _Keys(torch.utils.data.Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, key: tuple[int, int]) -> torch.Tensor:
        return torch.tensor(key)


def test_epochs_reach_the_batches_the_fits_loader_prepared_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each epoch sets the sampler's epoch as Lightning does, so `EpochLoader` keeps its
    workers and hands over the next epoch's batches instead of restarting them."""
    loader = EpochLoader(
        _Keys(), sampler=EpochSampler(8, batch_size=4), batch_size=4, num_workers=1,
        persistent_workers=True, drop_last=True,
    )  # fmt: skip
    seen: list[tuple[int, int]] = []

    def take(dm: object, batch: torch.Tensor) -> int:
        seen.append((id(loader._iterator), int(batch[0, 0])))
        return len(batch)

    monkeypatch.setattr(benchmark_loader, "_take", take)
    benchmark_loader._epochs_rate(object(), loader, 3)  # type: ignore[arg-type]
    assert [epoch for _, epoch in seen] == [0, 0, 1, 1, 2, 2]
    assert len({iterator for iterator, _ in seen}) == 1  # the workers were never restarted
