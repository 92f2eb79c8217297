"""Mosaic partners come from the authors' buffer of recently loaded images (``mosaic_pool
buffer``) or from the sample's own batch (``batch``), and either pool is a function of the epoch
permutations alone, so a resumed run draws the partners of an uninterrupted one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from lucid_train.data.augment import AugmentConfig
from lucid_train.data.datamodule import LucidDataModule
from lucid_train.data.dataset import TrainDataset, buffer_length
from lucid_train.data.formats.layout import read_split
from lucid_train.data.records import Task


def _dataset(small_synthetic: Callable[[Task], Path], pool: str, batch: int = 2) -> TrainDataset:
    index = read_split(small_synthetic("detect"), "train", task="detect")
    return TrainDataset(index.records, index.schema, 64, AugmentConfig(), seed=3,
                        pool_size=batch, mosaic_pool=pool)  # type: ignore[arg-type]  # fmt: skip


def test_the_buffer_holds_the_recent_epoch_positions_and_the_previous_epochs_tail(
    small_synthetic: Callable[[Task], Path],
) -> None:
    ds = _dataset(small_synthetic, "buffer")
    n = len(ds)
    window = buffer_length(n, 2) - 1  # the authors' buffer keeps one fewer than its bound
    assert ds.window == window == min(n, 16) - 1
    p0, p1 = ds.permutation(0), ds.permutation(1)
    assert list(ds.partners(0, 0)[0]) == [p0[0]]  # the buffer starts empty in the first epoch
    assert list(ds.partners(0, 3)[0]) == p0[:4].tolist()
    last = n - 1
    assert list(ds.partners(0, last)[0]) == p0[last - window + 1 :].tolist()
    # at the next epoch's start the loader has just read the previous epoch's tail
    assert list(ds.partners(1, 1)[0]) == [*p0[n - window + 2 :].tolist(), *p1[:2].tolist()]
    assert len(ds.partners(1, 1)[0]) == window


def test_the_mixup_partner_is_any_image_with_the_buffer_and_the_batch_with_batch_pools(
    small_synthetic: Callable[[Task], Path],
) -> None:
    buffered = _dataset(small_synthetic, "buffer")
    assert list(buffered.partners(2, 5)[1]) == list(range(len(buffered)))
    batch = _dataset(small_synthetic, "batch", batch=4)
    mosaic, mixup = batch.partners(2, 5)
    assert list(mosaic) == list(mixup) == batch.permutation(2)[4:8].tolist()


def test_a_resumed_dataset_draws_the_partners_of_an_uninterrupted_one(
    small_synthetic: Callable[[Task], Path],
) -> None:
    """The buffer is no state a worker accumulates: a fresh dataset at epoch 3 (a resumed run)
    gives every sample the pools and the pixels of one that read the epochs before."""
    seen = _dataset(small_synthetic, "buffer")
    for epoch in range(3):
        for position in range(0, len(seen), 3):
            seen.partners(epoch, position)
    fresh = _dataset(small_synthetic, "buffer")
    for position in (0, 1, len(fresh) - 1):
        assert [list(p) for p in fresh.partners(3, position)] == [
            list(p) for p in seen.partners(3, position)
        ]
        a, b = fresh[(3, position)], seen[(3, position)]
        assert a.image is not None and b.image is not None
        assert np.array_equal(a.image, b.image) and np.array_equal(a.targets.boxes, b.targets.boxes)


def test_buffer_batches_hold_about_the_authors_count_of_distinct_sources(
    small_synthetic: Callable[[Task], Path],
) -> None:
    """About three times the batch's distinct images, as the authors' buffer gives (51 of 64
    tiles at batch 16); the batch pool holds the batch's own images only."""
    counts = {}
    for pool in ("buffer", "batch"):
        ds = _dataset(small_synthetic, pool, batch=4)
        aug, distinct = ds.augment(1), []
        for start in range(0, len(ds) - 3, 4):
            used: set[int] = set()
            for position in range(start, start + 4):
                mosaic, mixup = ds.partners(1, position)
                seed = np.random.SeedSequence([3, 1, position])
                params = aug.sample(int(ds.permutation(1)[position]), seed, mosaic, mixup)
                assert params.geometry.mosaic is not None
                used |= {params.geometry.index, *params.geometry.mosaic.partners}
            distinct.append(len(used))
        counts[pool] = float(np.mean(distinct))
    assert counts["batch"] <= 4 < 8 <= counts["buffer"], counts


def test_the_data_module_refuses_an_unknown_pool() -> None:
    with pytest.raises(ValueError, match="mosaic_pool"):
        LucidDataModule("detect", mosaic_pool="dataset")  # type: ignore[arg-type]
