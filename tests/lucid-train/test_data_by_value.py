"""A batch leaves its loader worker with its small tensors inside the message (`by_value`): they
arrive with the same dtype, shape and values, and only the large ones travel as shared-memory
segments, each of which costs the receiver a handshake with the worker."""

from __future__ import annotations

import pickle
from dataclasses import fields
from multiprocessing.reduction import ForkingPickler

import numpy as np
import torch
import torch.multiprocessing  # registers torch's reductions with ForkingPickler

from lucid_train.data.augment.render_device import PixelBatch
from lucid_train.data.by_value import BY_VALUE_BYTES
from lucid_train.data.targets import Targets
from lucid_train.data.transport import Sample, collate


def _through_a_worker_queue(obj: object) -> object:
    """What a DataLoader worker's queue does to a batch: torch's ForkingPickler, then loads."""
    return pickle.loads(bytes(ForkingPickler.dumps(obj)))


def _batch(side: int = 64) -> object:
    rng = np.random.default_rng(0)
    samples = []
    for i in range(4):
        xy = rng.uniform(0, side - 10, (5, 2)).astype(np.float32)
        targets = Targets(boxes=np.c_[xy, xy + 8].astype(np.float32),
                          labels=rng.integers(0, 3, 5), difficult=np.zeros(5, bool))  # fmt: skip
        image = rng.integers(0, 255, (side, side, 3), dtype=np.uint8)
        samples.append(Sample(image, targets, None, i + 1, (side, side), (1.0, 0.0, 0.0)))
    return collate(samples)


def test_a_batch_ships_only_its_large_tensors_as_shared_segments() -> None:
    batch = _batch(side=256)  # 4 x 256 x 256 x 3 images: over the limit
    assert batch.images.nbytes >= BY_VALUE_BYTES
    ForkingPickler.dumps(batch)
    shared = {f.name for f in fields(batch) if getattr(batch, f.name) is not None
              and isinstance(getattr(batch, f.name), torch.Tensor)
              and getattr(batch, f.name).is_shared()}  # fmt: skip
    assert shared == {"images"}


def test_a_batch_arrives_with_every_tensors_dtype_shape_and_values() -> None:
    batch = _batch()
    got = _through_a_worker_queue(batch)
    assert type(got) is type(batch)
    for f in fields(batch):
        want, have = getattr(batch, f.name), getattr(got, f.name)
        if isinstance(want, torch.Tensor):
            assert have.dtype == want.dtype and have.shape == want.shape, f.name
            assert torch.equal(have, want), f.name
        else:
            assert have == want, f.name


def test_a_pixel_batch_arrives_with_every_tensors_dtype_shape_and_values() -> None:
    gen = torch.Generator().manual_seed(0)
    values: dict[str, object] = {"size": 32, "fill": 114, "axis_aligned": True, "any_hsv": False,
                                 "jpeg_paths": ("a.jpg",)}  # fmt: skip
    dtypes = {"tile_inverse": torch.float64, "mix_ratio": torch.float32, "hsv": torch.float32,
              "rows": torch.uint8, "paste_bits": torch.uint8, "hsv_tables": torch.uint8,
              "jpeg": torch.uint8, "jitter": torch.bool, "flip": torch.bool}  # fmt: skip
    for f in fields(PixelBatch):
        if f.name in values or f.name in ("decoded", "ready"):
            continue
        dtype = dtypes.get(f.name, torch.int64)
        shape = (300_000,) if f.name == "jpeg" else (3, 2)  # one over the limit
        if dtype.is_floating_point:
            values[f.name] = torch.rand(shape, generator=gen, dtype=dtype)
        else:
            values[f.name] = torch.randint(0, 2, shape, generator=gen).to(dtype)
    pixels = PixelBatch(**values)  # type: ignore[arg-type]
    got = _through_a_worker_queue(pixels)
    for f in fields(PixelBatch):
        want, have = getattr(pixels, f.name), getattr(got, f.name)
        if isinstance(want, torch.Tensor):
            assert have.dtype == want.dtype and torch.equal(have, want), f.name
        else:
            assert have == want, f.name
    assert pixels.jpeg.is_shared() and not pixels.tile_inverse.is_shared()
